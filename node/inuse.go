package node

import (
	"context"
	"os"
	"path/filepath"
)

// InUse reports whether this host uses a volume's dataset or zvol: its
// mount table shows it (staged, published, or mounted by an operator), or,
// for a zvol, a process holds its device open (a virtual machine's disk, a
// tool writing to it). The controller asks before a move's final round and
// before adopting or releasing a volume; it is the same rule every other
// mount check asks. Mounts at the mountpoints except names do not count.
func (s *Server) InUse(dataset string, except ...string) (bool, error) {
	recognise, err := s.mountsOf(volumeRef{dataset: dataset})
	if err != nil {
		return false, err
	}
	mounts, err := s.mounter.Mounts()
	if err != nil {
		return false, err
	}
	for _, mount := range mounts {
		if recognise.Shows(mount) && !contains(except, mount.MountPoint) {
			return true, nil
		}
	}
	return recognise.Device != "" && heldOpen(recognise.Device), nil
}

// heldOpen reports whether any process has device open, from the
// descriptors /proc lists; descriptors it cannot read (processes gone
// meanwhile) are skipped.
func heldOpen(device string) bool {
	descriptors, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, descriptor := range descriptors {
		if target, err := os.Readlink(descriptor); err == nil && target == device {
			return true
		}
	}
	return false
}

// ContentOf reports what a zvol holds as blkid names it ("" for nothing it
// recognises), read without mounting or writing anything.
func (s *Server) ContentOf(ctx context.Context, dataset string) (string, error) {
	device, err := s.waitForDevice(ctx, volumeRef{id: dataset, dataset: dataset})
	if err != nil {
		return "", err
	}
	return s.mounter.Probe(ctx, device)
}

package node

import (
	"context"
	"path/filepath"
)

// stageBlock bind-mounts the zvol's device node onto a file in the staging
// directory: the mark that the volume passed the ownership guard, from which
// publish binds it on.
func (s *Server) stageBlock(ctx context.Context, plan stagePlan) error {
	device, err := s.waitForDevice(ctx, plan.volume)
	if err != nil {
		return err
	}
	file, err := s.hostPath("staging_target_path", filepath.Join(plan.staging, blockStagingFile))
	if err != nil {
		return err
	}
	made, err := makeMountPoint(file, true)
	if err != nil {
		return err
	}
	if err := s.mounter.Bind(device, file); err != nil {
		if made {
			_ = removeMountPoint(file)
		}
		return err
	}
	return nil
}

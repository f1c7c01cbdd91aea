package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// counter runs calls against the counting daemon and attributes the logged
// commands to them: those that started during the call, and those that
// started after it returned (the reaper it woke) until the daemon was idle.
type counter struct {
	b   *bench
	d   *daemon
	log *commandLog
}

// call runs one call and records its commands under label; it returns the
// commands that ran during the call.
func (c *counter) call(ctx context.Context, label string, call func(context.Context) error) ([]loggedCommand, error) {
	before, err := c.log.read()
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, callLimit)
	err = call(callCtx)
	cancel()
	returned := time.Now()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	// Background work starts right after the call; give it time to start,
	// and again after each command of it: between two commands of a
	// reaper pass the daemon runs none, and the second would otherwise
	// count as the next call's.
	var all []loggedCommand
	for seen := -1; seen != len(all); {
		seen = len(all)
		time.Sleep(300 * time.Millisecond)
		c.d.quiesce()
		if all, err = c.log.read(); err != nil {
			return nil, err
		}
	}
	var during, after []loggedCommand
	for _, command := range all[len(before):] {
		if command.at.After(returned) {
			after = append(after, command)
		} else {
			during = append(during, command)
		}
	}
	text := summarize(during)
	if len(after) > 0 {
		text += fmt.Sprintf(" (+%s in the background)", summarize(after))
	}
	c.b.counts[label] = text
	return during, nil
}

// capture keeps the argv of the first command named sub as a template.
func (c *counter) capture(name, sub string, commands []loggedCommand) error {
	for _, command := range commands {
		if command.name() == sub {
			c.b.templates[name] = template(command.args)
			return nil
		}
	}
	return fmt.Errorf("no zfs %s among %v: cannot make the bare %s command", sub, commands, name)
}

// countCommands is section 6. Its calls also provide the templates of the
// bare commands of the other sections.
func (b *bench) countCommands(ctx context.Context) error {
	commandLog, err := newCommandLog(filepath.Join(b.cfg.work, "wrappers"), b.tools)
	if err != nil {
		return err
	}
	cfg := b.daemonConfig("count")
	cfg.path = commandLog.pathEnv()
	startedAt := time.Now()
	d, err := startDaemon(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	d.quiesce()
	b.version = pluginVersion(ctx, d)
	startup, err := commandLog.read()
	if err != nil {
		return err
	}
	c := &counter{b: b, d: d, log: commandLog}
	if err := b.countedCalls(ctx, c); err != nil {
		return err
	}
	all, err := commandLog.read()
	if err != nil {
		return err
	}
	b.addCountRows(startup, startedAt, all)
	return nil
}

// countedCalls makes every call whose commands the table shows.
//
// long: one call a row of the command-count table, in the table's order
func (b *bench) countedCalls(ctx context.Context, c *counter) error {
	var fs, zvol, thin, clone, copied, ext4 *csi.Volume
	var snapshot *csi.Snapshot
	create := func(label string, req *csi.CreateVolumeRequest, volume **csi.Volume, templateName string) error {
		commands, err := c.call(ctx, label, func(ctx context.Context) error {
			response, err := c.d.controller.CreateVolume(ctx, req)
			if volume != nil && err == nil {
				*volume = response.GetVolume()
			}
			return err
		})
		if err != nil || templateName == "" {
			return err
		}
		sub := "create"
		if req.GetVolumeContentSource() != nil {
			sub = "clone"
		}
		return c.capture(templateName, sub, commands)
	}
	steps := []func() error{
		func() error {
			return create("CreateVolume dataset", volumeRequest("count-fs", mountCapability(""), false), &fs, "create-fs")
		},
		func() error {
			return create("CreateVolume dataset, again (idempotent)", volumeRequest("count-fs", mountCapability(""), false), nil, "")
		},
		func() error {
			return create("CreateVolume zvol", volumeRequest("count-zvol", blockCapability(), false), &zvol, "create-zvol")
		},
		func() error {
			return create("CreateVolume dataset, thin", volumeRequest("count-thin", mountCapability(""), true), &thin, "create-thin")
		},
		func() error {
			return create("CreateVolume ext4 zvol", volumeRequest("count-ext4", mountCapability("ext4"), false), &ext4, "")
		},
		func() error {
			commands, err := c.call(ctx, "CreateSnapshot", func(ctx context.Context) error {
				response, err := c.d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "count-snap", SourceVolumeId: fs.GetVolumeId()})
				snapshot = response.GetSnapshot()
				return err
			})
			if err != nil {
				return err
			}
			// Where programs set properties CreateSnapshot is one guarded channel
			// program; its bare equivalent is the zfs snapshot the older
			// path runs, with the snapshot's one property.
			_ = c.capture("snapshot-list", "list", commands)
			_, snapshotName, _ := strings.Cut(snapshot.GetSnapshotId(), ":")
			if c.capture("snapshot", "snapshot", commands) != nil {
				c.b.templates["snapshot"] = template{"snapshot", "-o", c.b.props.SnapshotName + "=count-snap", snapshotName}
			}
			return c.captureProgram("snapshot", commands, map[string]string{"snapshot": snapshotName,
				"dataset": datasetOfID(fs.GetVolumeId()), "name": "count-snap"})
		},
		func() error {
			var group *csi.VolumeGroupSnapshot
			commands, err := c.call(ctx, "CreateVolumeGroupSnapshot of 3 volumes", func(ctx context.Context) error {
				response, err := c.d.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "count-group",
					SourceVolumeIds: []string{fs.GetVolumeId(), zvol.GetVolumeId(), thin.GetVolumeId()}})
				group = response.GetGroupSnapshot()
				return err
			})
			if status.Code(err) == codes.FailedPrecondition {
				c.b.notes = append(c.b.notes, "group snapshots: refused on this ZFS ("+err.Error()+")")
				return nil
			} else if err != nil {
				return err
			}
			if err := c.captureProgram("group-snapshot", commands, nil); err != nil {
				return err
			}
			_, err = c.call(ctx, "DeleteVolumeGroupSnapshot of 3 volumes", func(ctx context.Context) error {
				var members []string
				for _, member := range group.GetSnapshots() {
					members = append(members, member.GetSnapshotId())
				}
				_, err := c.d.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{
					GroupSnapshotId: group.GetGroupSnapshotId(), SnapshotIds: members})
				return err
			})
			return err
		},
		func() error {
			return create("CreateVolume from snapshot", fromSnapshot("count-clone", snapshot.GetSnapshotId()), &clone, "clone")
		},
		func() error {
			return create("CreateVolume from volume", fromVolume("count-copy", fs.GetVolumeId()), &copied, "")
		},
		func() error {
			commands, err := c.call(ctx, "ListVolumes", func(ctx context.Context) error {
				_, err := c.d.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(b.cfg.pageSize)})
				return err
			})
			if err != nil {
				return err
			}
			return c.capture("list", "list", commands)
		},
		func() error {
			_, err := c.call(ctx, "ListSnapshots", func(ctx context.Context) error {
				_, err := c.d.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
				return err
			})
			return err
		},
		func() error {
			_, err := c.call(ctx, "GetCapacity", func(ctx context.Context) error {
				_, err := c.d.controller.GetCapacity(ctx, &csi.GetCapacityRequest{})
				return err
			})
			return err
		},
		func() error {
			_, err := c.call(ctx, "ControllerExpandVolume", func(ctx context.Context) error {
				_, err := c.d.controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: thin.GetVolumeId(),
					CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}})
				return err
			})
			return err
		},
		func() error { return b.countNodeCalls(ctx, c, fs, "dataset", mountCapability("")) },
		func() error { return b.countNodeCalls(ctx, c, ext4, "ext4 zvol", mountCapability("ext4")) },
		func() error { return b.countDelete(ctx, c, "DeleteVolume of a clone", clone, "destroy-clone") },
		func() error {
			commands, err := c.call(ctx, "DeleteSnapshot", func(ctx context.Context) error {
				_, err := c.d.controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapshot.GetSnapshotId()})
				return err
			})
			if err != nil {
				return err
			}
			_, snapshotName, _ := strings.Cut(snapshot.GetSnapshotId(), ":")
			return c.captureProgram("destroy-snapshot", commands, map[string]string{"snapshot": snapshotName})
		},
		func() error { return b.countDelete(ctx, c, "DeleteVolume of a clone of a volume", copied, "") },
		func() error { return b.countDelete(ctx, c, "DeleteVolume dataset", fs, "destroy") },
		func() error { return b.countDelete(ctx, c, "DeleteVolume zvol", zvol, "") },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// countDelete deletes a volume; program names the template its zfs program
// becomes ("" for none).
func (b *bench) countDelete(ctx context.Context, c *counter, label string, volume *csi.Volume, program string) error {
	commands, err := c.call(ctx, label, func(ctx context.Context) error {
		_, err := c.d.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()})
		return err
	})
	if err != nil || program == "" {
		return err
	}
	return c.captureProgram(program, commands, map[string]string{"dataset": datasetOfID(volume.GetVolumeId())})
}

// datasetOfID is the dataset of a volume ID of the bench's daemons.
func datasetOfID(volumeID string) string { return strings.TrimPrefix(volumeID, nodeID+":") }

// countNodeCalls stages and publishes a volume twice: the first stage of an
// ext4 zvol formats it, the second is the usual case.
func (b *bench) countNodeCalls(ctx context.Context, c *counter, volume *csi.Volume, kind string, capability *csi.VolumeCapability) error {
	staging := filepath.Join(b.cfg.work, "count", "staging-"+volume.GetVolumeId()[len(nodeID)+1:])
	target := filepath.Join(b.cfg.work, "count", "target-"+volume.GetVolumeId()[len(nodeID)+1:])
	for _, dir := range []string{staging, filepath.Dir(target)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	for round, suffix := range []string{" (first)", ""} {
		if kind == "dataset" && round == 0 {
			suffix = ""
		}
		calls := []struct {
			label string
			call  func(context.Context) error
		}{
			{"NodeStageVolume " + kind + suffix, func(ctx context.Context) error {
				_, err := c.d.node.NodeStageVolume(ctx, stageRequest(volume, staging, capability))
				return err
			}},
			{"NodePublishVolume " + kind, func(ctx context.Context) error {
				_, err := c.d.node.NodePublishVolume(ctx, publishRequest(volume, staging, target, capability))
				return err
			}},
			{"NodeGetVolumeStats " + kind, func(ctx context.Context) error {
				_, err := c.d.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: volume.GetVolumeId(), VolumePath: target})
				return err
			}},
			{"NodeUnpublishVolume " + kind, func(ctx context.Context) error {
				_, err := c.d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volume.GetVolumeId(), TargetPath: target})
				return err
			}},
			{"NodeUnstageVolume " + kind, func(ctx context.Context) error {
				_, err := c.d.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volume.GetVolumeId(), StagingTargetPath: staging})
				return err
			}},
		}
		for _, call := range calls {
			if _, err := c.call(ctx, call.label, call.call); err != nil {
				return err
			}
		}
	}
	return nil
}

// countOrder is the order of the section-6 rows.
var countOrder = []string{
	"CreateVolume dataset", "CreateVolume dataset, again (idempotent)", "CreateVolume dataset, thin", "CreateVolume zvol",
	"CreateVolume ext4 zvol", "CreateSnapshot", "CreateVolume from snapshot", "CreateVolume from volume",
	"ListVolumes", "ListSnapshots", "GetCapacity", "ControllerExpandVolume",
	"NodeStageVolume dataset", "NodePublishVolume dataset", "NodeGetVolumeStats dataset", "NodeUnpublishVolume dataset", "NodeUnstageVolume dataset",
	"NodeStageVolume ext4 zvol (first)", "NodeStageVolume ext4 zvol", "NodePublishVolume ext4 zvol", "NodeGetVolumeStats ext4 zvol",
	"NodeUnpublishVolume ext4 zvol", "NodeUnstageVolume ext4 zvol",
	"DeleteVolume of a clone", "DeleteSnapshot", "DeleteVolume of a clone of a volume", "DeleteVolume dataset", "DeleteVolume zvol",
}

// addCountRows puts section 6 into the table: start-up, then each call.
func (b *bench) addCountRows(startup []loggedCommand, startedAt time.Time, all []loggedCommand) {
	rows := []row{{section: "6", what: "daemon start, one Probe, the reaper's sweep", commands: countSummary(startup)}}
	for _, label := range countOrder {
		if text, ok := b.counts[label]; ok {
			rows = append(rows, row{section: "6", what: label, commands: text})
		}
	}
	b.rows["6"] = rows
	b.notes = append(b.notes, fmt.Sprintf("section 6: %d zfs/zpool commands in %.0fs, counted by wrappers on the counting daemon's PATH",
		len(all), time.Since(startedAt).Seconds()))
}

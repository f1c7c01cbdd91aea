package controller

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// A volume name is one volume, whichever parent dataset and generation it
// went to: what every CreateVolume executor asks of the name before and
// after it makes the volume. A name whose earlier volume is deleted but
// still held by its snapshots' clones moves to the next generation of its
// dataset name (rules.Namer's VolumeComponent).

// generationDataset is the dataset the plan's volume gets in generation.
func (s *Server) generationDataset(plan volumePlan, generation int) string {
	return plan.params.parent + "/" + s.namer.VolumeComponent(plan.name, generation)
}

// generationsHeld is the answer when every generation of the name is held
// by a deleted volume's dependents.
func generationsHeld(plan volumePlan) error {
	return status.Errorf(codes.ResourceExhausted,
		"volume name %q: %d earlier volumes of this name are deleted but still held by their snapshots' clones", rules.Bounded(plan.name), rules.MaxGenerations)
}

// checkOtherParents refuses a name already used under another parent.
func (s *Server) checkOtherParents(ctx context.Context, plan volumePlan) error {
	if len(s.cfg.ParentDatasets) < 2 {
		return nil
	}
	_, err := s.findInOtherParents(ctx, plan)
	return err
}

// existingVolume answers a request whose volume already exists: the same
// volume when the request is compatible with it, ALREADY_EXISTS otherwise.
func (s *Server) existingVolume(plan volumePlan, row *zfs.Dataset, err error) (*csi.CreateVolumeResponse, error) {
	if err != nil {
		return nil, err
	}
	if problem := s.incompatibility(plan, *row); problem != "" {
		return nil, status.Errorf(codes.AlreadyExists, "volume %q exists (%s) but %s", rules.Bounded(plan.name), row.Name, problem)
	}
	return &csi.CreateVolumeResponse{Volume: s.csiVolume(*row)}, nil
}

func (s *Server) incompatibility(plan volumePlan, row zfs.Dataset) string {
	size := capacity(row)
	switch {
	case (row.Type == zfs.Volume) != plan.zvol || row.User[s.props.FSType] != plan.fsType:
		return fmt.Sprintf("it is %s, the request asks for %s",
			describe(row.Type == zfs.Volume, row.User[s.props.FSType]), describe(plan.zvol, plan.fsType))
	case size < uint64(plan.capacity.GetRequiredBytes()):
		return fmt.Sprintf("its %d bytes are less than the %d required", size, plan.capacity.GetRequiredBytes())
	case plan.capacity.GetLimitBytes() > 0 && size > uint64(plan.capacity.GetLimitBytes()):
		return fmt.Sprintf("its %d bytes exceed the limit of %d", size, plan.capacity.GetLimitBytes())
	case row.User[s.props.Source] != plan.sourceID:
		return fmt.Sprintf("its content source is %q, the request's %q", row.User[s.props.Source], rules.Bounded(plan.sourceID))
	case row.User[s.props.ParamsHash] != plan.params.hash:
		return "it was created with other parameters"
	}
	return ""
}

// findByName looks for the live volume of plan.name among every generation of
// its dataset name in one zfs list. It returns that volume, or the first
// generation whose name is free (0 when none is).
func (s *Server) findByName(ctx context.Context, plan volumePlan) (*zfs.Dataset, int, error) {
	candidates := make([]string, 0, rules.MaxGenerations)
	for generation := 1; generation <= rules.MaxGenerations; generation++ {
		candidates = append(candidates, s.generationDataset(plan, generation))
	}
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: candidates, Types: []zfs.Type{zfs.Filesystem, zfs.Volume},
		UserProps: s.props.All(), SkipMissing: true})
	if err != nil {
		return nil, 0, err
	}
	taken := map[string]bool{}
	for i := range rows {
		row := rows[i]
		taken[row.Name] = true
		switch {
		case !s.owner.Marked(row):
			return nil, 0, status.Errorf(codes.AlreadyExists,
				"dataset %s exists and is not managed by %s; it is left alone", row.Name, s.cfg.DriverName)
		case s.owner.DeletedVolume(row):
			continue
		case rules.DecodeName(row.User[s.props.CSIName]) != plan.name:
			return nil, 0, status.Errorf(codes.AlreadyExists, "dataset %s already holds volume %q",
				row.Name, rules.Bounded(rules.DecodeName(row.User[s.props.CSIName])))
		default:
			return &row, 0, nil
		}
	}
	for generation, name := range candidates {
		if !taken[name] {
			return nil, generation + 1, nil
		}
	}
	return nil, 0, nil
}

// findInOtherParents catches a name already used under another allowed
// parent (one zfs list; only when several parents are configured).
func (s *Server) findInOtherParents(ctx context.Context, plan volumePlan) (*zfs.Dataset, error) {
	var candidates []string
	for _, parent := range s.cfg.ParentDatasets {
		if parent != plan.params.parent {
			candidates = append(candidates, parent+"/"+s.namer.VolumeComponent(plan.name, 1))
		}
	}
	// A parent in a suspended pool cannot answer; it must not stop volumes
	// being made in the others (a name is one CO object: the same name with
	// another parent is a CO's mistake, caught whenever the pool can tell).
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: candidates, UserProps: s.props.All(),
		SkipMissing: true, SkipSuspended: true})
	if err != nil {
		return nil, err
	}
	for i := range rows {
		if s.owner.LiveVolume(rows[i]) && rules.DecodeName(rows[i].User[s.props.CSIName]) == plan.name {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q already exists under another parent dataset, as %s",
				rules.Bounded(plan.name), rows[i].Name)
		}
	}
	return nil, nil
}

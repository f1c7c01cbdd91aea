package controller

import "context"

// checkedSource makes the checks every executor makes before it touches
// ZFS, the same wherever the source lives: the plan's source resolved and
// checked (none for an empty volume), the size the volume gets from the
// plan and that source, and the name free under the other parents.
func (s *Server) checkedSource(ctx context.Context, plan volumePlan) (*source, uint64, error) {
	var src *source
	if plan.sourceID != "" {
		var err error
		if src, err = s.resolveSource(ctx, plan); err != nil {
			return nil, 0, err
		}
	}
	size, err := plannedSize(plan, src)
	if err != nil {
		return nil, 0, err
	}
	if err := s.checkOtherParents(ctx, plan); err != nil {
		return nil, 0, err
	}
	return src, size, nil
}

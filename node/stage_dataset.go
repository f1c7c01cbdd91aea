package node

// stageDataset mounts the dataset at the staging path: one mount(2), the
// dataset's mountpoint=legacy leaving the mounting to the node
// (ARCHITECTURE.md decision 8).
func (s *Server) stageDataset(plan stagePlan) error {
	return s.mounter.Mount(plan.volume.dataset, plan.staging, "zfs", plan.options.mountFlags(), plan.options.data)
}

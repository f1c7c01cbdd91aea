package node

// InUse reports whether this host's mount table shows a volume's dataset
// or zvol anywhere (staged, published, or mounted by an operator): the
// controller's question before a move's final round, which must find the
// workload gone. It asks the same rule every other mount check does.
func (s *Server) InUse(dataset string) (bool, error) {
	recognise, err := s.mountsOf(volumeRef{dataset: dataset})
	if err != nil {
		return false, err
	}
	mounts, err := s.mounter.Mounts()
	if err != nil {
		return false, err
	}
	for _, mount := range mounts {
		if recognise.Shows(mount) {
			return true, nil
		}
	}
	return false, nil
}

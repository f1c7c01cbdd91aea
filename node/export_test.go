package node

// What the external tests (package node_test) reach inside the package for.

// BlockStagingFile is the file a block volume's device is bound to inside
// its staging directory.
const BlockStagingFile = blockStagingFile

// Hold takes the volume's in-flight lock as a running call would.
func (s *Server) Hold(volumeID, dataset string) (release func(), err error) {
	return s.lock(volumeRef{id: volumeID, dataset: dataset})
}

// Package rpc serves the CSI services over gRPC: the server on a unix socket
// (Server, ListenUnix) and its interceptors (one log line per call, panics
// recovered, errors mapped), the one mapping from typed errors to gRPC
// codes (Status, Answer), the Identity service, the operator's socket and
// its protocol (OperatorEndpoint, NewOperatorServer), and the phrase of a
// call refused as another node's (OtherNodeMarker).
//
// It takes the services as csi.ControllerServer, csi.NodeServer, … values
// (Services) and never imports the packages that implement them, nor the
// forwarding that packages forward adds to them.
package rpc

package checks

import "google.golang.org/grpc"

// grpcInfo names a call for the metrics interceptor.
var grpcInfo = grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/CreateVolume"}

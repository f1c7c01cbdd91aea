// Package rules holds the driver's domain rules, the ones every service
// and command asks instead of keeping a copy: the instance's Config and
// which IDs name something of this node, the ID codec, CSI name → ZFS name
// mapping, the ownership guard (Owner: which rows ZFS lists are live or
// deleted volumes and snapshots of ours), the user properties, the volume
// kinds and the capabilities each serves, pool status as CSI health, the
// key in a request's secrets, per-key in-flight locks, and how much of a
// caller's string a message repeats (Bounded) and a size as CSI carries it.
//
// It runs no server and answers no call: its refusals are typed errors
// (ErrMalformedID, ErrNotOurs, *ForeignNodeError, ErrInFlight) that package
// rpc maps to gRPC codes, and it imports nothing of the module but zfs.
package rules

// Package guest holds no code the guest runs: the guests run the shell
// scripts beside this file, booted by ../run.sh. Its tests hold those
// scripts, and the host's that prepare their runs, to the rules the host
// relies on, such as each Go test binary's deadline fitting inside the
// boot's, an interrupted run taking its guests down with it, and the
// conformance run having a stand-in for every image its suite names.
package guest

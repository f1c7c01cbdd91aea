// Package guest holds no code the guest runs: the guests run the shell
// scripts beside this file, booted by ../run.sh. Its tests hold those
// scripts to the rules the host relies on, such as each Go test binary's
// deadline fitting inside the boot's, and an interrupted run taking its
// guests down with it.
package guest

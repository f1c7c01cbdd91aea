// Package guest holds no code the guest runs: the guest runs the shell
// scripts beside this file. Its tests hold those scripts to the rules the
// host relies on, such as each Go test binary's deadline fitting inside the
// boot's.
package guest

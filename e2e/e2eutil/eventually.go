// Package e2eutil holds what more than one of the e2e suites (e2e/tests,
// e2e/k8s/suite, e2e/nomad/suite) needs, so that each rule of waiting or
// judging has one home instead of a copy per suite.
package e2eutil

import (
	"testing"
	"time"
)

// Eventually polls cond every second until it says done or timeout passes;
// the last error it returned is in the failure.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		done, err := cond()
		if err != nil {
			last = err
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
		}
		time.Sleep(time.Second)
	}
}

package e2eutil

import (
	"errors"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	Eventually(t, 5*time.Second, "the second call", func() (bool, error) {
		calls++
		if calls < 2 {
			return false, errors.New("not yet")
		}
		return true, nil
	})
	if calls != 2 {
		t.Errorf("%d calls, want 2", calls)
	}
}

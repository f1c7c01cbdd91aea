package suite

import (
	"fmt"
	"os"
	"regexp"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// harnessProbePeriod is how often, once scenario Manifests has seen the
// shipped readiness probe work at its own period, the sidecars probe for the
// rest of a run. Each exec probe is a runc exec, the zfs-csi binary, and the
// daemon's zpool and zfs under it: on these TCG nodes one took 8 to 16 s, and
// one was running on each node nearly all the time (kubelet's ExecSync: 294
// on node b in 52 minutes, 3,126 s in all), while node b's idle guest took
// as much of the host's two cores as node a running the scenarios.
const harnessProbePeriod = 60

// probeLessOften sets the sidecars' readiness probe period to
// harnessProbePeriod and waits for the DaemonSet's rollout to finish.
func (e *env) probeLessOften(t *testing.T) {
	t.Helper()
	dss := e.cs.AppsV1().DaemonSets(e.driverNS)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := dss.Get(ctx(), sidecarsDS, metav1.GetOptions{})
		if err != nil {
			return err
		}
		probes := 0
		for i := range ds.Spec.Template.Spec.Containers {
			if p := ds.Spec.Template.Spec.Containers[i].ReadinessProbe; p != nil {
				p.PeriodSeconds = harnessProbePeriod
				probes++
			}
		}
		if probes == 0 {
			return fmt.Errorf("DaemonSet %s has no readiness probe", sidecarsDS)
		}
		_, err = dss.Update(ctx(), ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.daemonSetReady(t, e.driverNS, sidecarsDS, e.nodesWithDaemon(t))
}

// TestTheHarnessProbesAtOnePeriod holds the three places that slow the
// sidecars' probe for a run to one period: this suite after scenario
// Manifests, the chart's values for scenario Chart, and guest a's
// conformance step before it hands the cluster to e2e.test.
func TestTheHarnessProbesAtOnePeriod(t *testing.T) {
	for _, c := range []struct{ file, pattern string }{
		{"../../guest/k8s/suite.sh", `(?m)^HARNESS_PROBE_PERIOD=(\d+)$`},
		{"../helm-values.yaml", `(?m)^readinessProbe:\n  periodSeconds: (\d+)$`},
	} {
		text, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(c.pattern).FindSubmatch(text)
		if m == nil {
			t.Errorf("%s: no probe period matches %s", c.file, c.pattern)
		} else if got := string(m[1]); got != fmt.Sprint(harnessProbePeriod) {
			t.Errorf("%s: probe period %s s, the suite's harnessProbePeriod is %d s", c.file, got, harnessProbePeriod)
		}
	}
}

package checks

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"gopkg.in/yaml.v3"
)

// alertTests is the file of alert rule tests, in the format of `promtool test
// rules` (rule_files, evaluation_interval, tests of input_series and
// alert_rule_test), with one difference: exp_annotations need only name the
// annotations a case checks, where promtool compares them all.
type alertTests struct {
	RuleFiles          []string       `yaml:"rule_files"`
	EvaluationInterval model.Duration `yaml:"evaluation_interval"`
	Tests              []struct {
		Name        string         `yaml:"name"`
		Interval    model.Duration `yaml:"interval"`
		InputSeries []struct {
			Series string `yaml:"series"`
			Values string `yaml:"values"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			EvalTime  model.Duration `yaml:"eval_time"`
			Alertname string         `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

const alertTestFile = "testdata/alert-tests.yaml"

// firing is one firing alert as a test sees it.
type firing struct{ labels, annotations map[string]string }

// evaluateRules loads the series of one test into a fresh storage, evaluates the
// rule files' groups every interval from time 0 to until, as Prometheus'
// rule manager does, and returns the alerts firing at each eval time asked.
func evaluateRules(t *testing.T, load string, interval time.Duration, ruleFiles []string, until time.Duration, at []time.Duration) map[time.Duration]map[string][]firing {
	t.Helper()
	suite, err := promqltest.NewLazyLoader(load, promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	if err != nil {
		t.Fatalf("input_series: %v", err)
	}
	defer suite.Close()
	suite.SubqueryInterval = interval
	manager := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
	})
	groups, errs := manager.LoadGroups(interval, labels.EmptyLabels(), "", nil, false, ruleFiles...)
	if len(errs) > 0 {
		t.Fatalf("rule files: %v", errs)
	}
	for _, group := range groups {
		for _, rule := range group.Rules() {
			if alerting, ok := rule.(*rules.AlertingRule); ok {
				alerting.SetRestored(true) // as after a restore: `for` counts from the first evaluation
			}
		}
	}
	seen := map[time.Duration]map[string][]firing{}
	start := time.Unix(0, 0).UTC()
	for offset := time.Duration(0); offset <= until; offset += interval {
		ts := start.Add(offset)
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				t.Fatal(err)
			}
			for _, group := range groups {
				group.Eval(suite.Context(), ts)
				for _, rule := range group.Rules() {
					if rule.LastError() != nil {
						t.Fatalf("%s at %v: %v", rule.Name(), offset, rule.LastError())
					}
				}
			}
		})
		// An eval time between two evaluations sees the earlier one, as in promtool.
		for _, when := range at {
			if when < offset || when >= offset+interval {
				continue
			}
			byName := map[string][]firing{}
			for _, group := range groups {
				for _, rule := range group.AlertingRules() {
					for _, alert := range rule.ActiveAlerts() {
						if alert.State == rules.StateFiring {
							byName[rule.Name()] = append(byName[rule.Name()], firing{alert.Labels.Map(), alert.Annotations.Map()})
						}
					}
				}
			}
			seen[when] = byName
		}
	}
	return seen
}

// Each alert, evaluated by Prometheus' own rule manager against series where
// it must fire and series where it must not: a healthy multi-node cluster
// (other nodes' calls refused by design, thick volumes reserving space) is
// silent, and each failure fires the alert meant for it, at its severity.
func TestAlertsFireWhereTheyMustAndOnlyThere(t *testing.T) {
	data, err := os.ReadFile(alertTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var file alertTests
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var ruleFiles []string
	for _, name := range file.RuleFiles {
		ruleFiles = append(ruleFiles, "testdata/"+name)
	}
	tested := map[string]map[bool]bool{} // alert → fired in some case, stayed silent in some case
	for _, test := range file.Tests {
		t.Run(test.Name, func(t *testing.T) {
			var load strings.Builder
			fmt.Fprintf(&load, "load %s\n", test.Interval)
			for _, series := range test.InputSeries {
				fmt.Fprintf(&load, "  %s %s\n", series.Series, series.Values)
			}
			var until time.Duration
			var at []time.Duration
			for _, check := range test.AlertRuleTest {
				until = max(until, time.Duration(check.EvalTime))
				at = append(at, time.Duration(check.EvalTime))
			}
			seen := evaluateRules(t, load.String(), time.Duration(file.EvaluationInterval), ruleFiles, until, at)
			for _, check := range test.AlertRuleTest {
				got := seen[time.Duration(check.EvalTime)][check.Alertname]
				if tested[check.Alertname] == nil {
					tested[check.Alertname] = map[bool]bool{}
				}
				tested[check.Alertname][len(check.ExpAlerts) > 0] = true
				var want []map[string]string
				for _, expected := range check.ExpAlerts {
					labels := maps.Clone(expected.ExpLabels)
					if labels == nil {
						labels = map[string]string{}
					}
					labels["alertname"] = check.Alertname
					want = append(want, labels)
				}
				if !sameLabelSets(got, want) {
					t.Errorf("at %s %s fires %v, want %v", check.EvalTime, check.Alertname, labelSets(got), want)
					continue
				}
				for i, expected := range check.ExpAlerts {
					for name, value := range expected.ExpAnnotations {
						if annotation := annotationOf(got, want[i], name); annotation != value {
							t.Errorf("at %s %s%v: annotation %s = %q, want %q", check.EvalTime, check.Alertname, want[i], name, annotation, value)
						}
					}
				}
			}
		})
	}
	for _, name := range alertNames(t) {
		if !tested[name][true] || !tested[name][false] {
			t.Errorf("%s: %s needs a case where it fires and one where it stays silent (fires %v, silent %v)",
				alertTestFile, name, tested[name][true], tested[name][false])
		}
	}
}

func labelSets(alerts []firing) []map[string]string {
	var sets []map[string]string
	for _, alert := range alerts {
		sets = append(sets, alert.labels)
	}
	return sets
}

func sameLabelSets(got []firing, want []map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	key := func(m map[string]string) string { return fmt.Sprint(m) } // fmt sorts map keys
	var gotKeys, wantKeys []string
	for _, alert := range got {
		gotKeys = append(gotKeys, key(alert.labels))
	}
	for _, labels := range want {
		wantKeys = append(wantKeys, key(labels))
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	return slices.Equal(gotKeys, wantKeys)
}

func annotationOf(alerts []firing, labels map[string]string, name string) string {
	for _, alert := range alerts {
		if maps.Equal(alert.labels, labels) {
			return alert.annotations[name]
		}
	}
	return ""
}

// shippedRules reads the alert rules of packaging/monitoring.
func shippedRules(t *testing.T) []map[string]any {
	t.Helper()
	data, err := os.ReadFile("../monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var all []map[string]any
	for _, group := range file.Groups {
		all = append(all, group.Rules...)
	}
	return all
}

func alertNames(t *testing.T) []string {
	var names []string
	for _, rule := range shippedRules(t) {
		names = append(names, fmt.Sprint(rule["alert"]))
	}
	return names
}

// repository is where runbook_url points: the files of this repository on
// GitHub at the tag of the release the rules ship in (vX.Y.Z, the newest of
// packaging/changelog.yml, which Chart.yaml and the packages' changelog name
// too), so an operator reads the runbook of the version that alerted, not
// whatever main says by then.
func repository(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../changelog.yml")
	if err != nil {
		t.Fatal(err)
	}
	var changelog []struct {
		Semver string `yaml:"semver"`
	}
	if err := yaml.Unmarshal(data, &changelog); err != nil || len(changelog) == 0 {
		t.Fatalf("packaging/changelog.yml: %v", err)
	}
	return "https://github.com/zfs-csi/zfs-csi/blob/v" + changelog[0].Semver + "/"
}

// Every rule has a runbook_url that names a heading of a file of this
// repository (GitHub's anchor of it) at this release's tag, and a severity
// of warning or critical.
func TestEveryAlertHasARunbookThatExists(t *testing.T) {
	repository := repository(t)
	for _, rule := range shippedRules(t) {
		name := fmt.Sprint(rule["alert"])
		annotations, _ := rule["annotations"].(map[string]any)
		url, _ := annotations["runbook_url"].(string)
		file, anchor, ok := strings.Cut(strings.TrimPrefix(url, repository), "#")
		if !strings.HasPrefix(url, repository) || !ok {
			t.Errorf("%s: runbook_url %q is not %sFILE#ANCHOR", name, url, repository)
			continue
		}
		text, err := os.ReadFile("../../" + file)
		if err != nil {
			t.Errorf("%s: runbook_url names %s: %v", name, file, err)
			continue
		}
		if !slices.Contains(headingAnchors(string(text)), anchor) {
			t.Errorf("%s: %s has no heading whose anchor is #%s", name, file, anchor)
		}
		labels, _ := rule["labels"].(map[string]any)
		if severity := labels["severity"]; severity != "warning" && severity != "critical" {
			t.Errorf("%s: severity %v", name, severity)
		}
	}
}

var (
	markdownHeading = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	// GitHub's anchors keep letters, digits, '-', '_' and spaces (which
	// become '-'), lowercased; a repeated anchor gets -1, -2, ...
	anchorDrops = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// headingAnchors lists the anchors GitHub makes for a Markdown file's
// headings (outside fenced code blocks).
func headingAnchors(markdown string) []string {
	var anchors []string
	count := map[string]int{}
	inFence := false
	for _, line := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		match := markdownHeading.FindStringSubmatch(line)
		if inFence || match == nil {
			continue
		}
		anchor := strings.ReplaceAll(anchorDrops.ReplaceAllString(strings.ToLower(match[1]), ""), " ", "-")
		if n := count[anchor]; n > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", anchor, n))
		} else {
			anchors = append(anchors, anchor)
		}
		count[anchor]++
	}
	return anchors
}

func TestHeadingAnchorsAreGitHubs(t *testing.T) {
	got := headingAnchors("# zfs-csi\n## Try it\n```sh\n# not a heading\n```\n### `ZFSCSIDaemonDown`\n## Try it\n#### Changed-block tracking (SnapshotMetadata)\n")
	want := []string{"zfs-csi", "try-it", "zfscsidaemondown", "try-it-1", "changed-block-tracking-snapshotmetadata"}
	if !slices.Equal(got, want) {
		t.Errorf("anchors %v, want %v", got, want)
	}
}

// clusterLabel is the label that tells clusters apart where one Prometheus
// (or Thanos, or a remote-written store) holds several: every aggregation
// that names what it keeps must keep it, and every join that names what it
// matches on must match on it, or two clusters' node-a become one alert.
const clusterLabel = "cluster"

// Every sum, max, … by (…) of the shipped rules keeps cluster, and every
// on (…) matches it (without and ignoring keep it by themselves).
func TestEveryAggregationKeepsTheClusterLabel(t *testing.T) {
	for _, rule := range shippedRules(t) {
		name, expr := fmt.Sprint(rule["alert"]), fmt.Sprint(rule["expr"])
		parsed, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
			switch node := node.(type) {
			case *parser.AggregateExpr:
				if !node.Without && !slices.Contains(node.Grouping, clusterLabel) {
					t.Errorf("%s: %s drops the label %s", name, node, clusterLabel)
				}
			case *parser.BinaryExpr:
				if matching := node.VectorMatching; matching != nil && matching.On && !slices.Contains(matching.MatchingLabels, clusterLabel) {
					t.Errorf("%s: %s matches without the label %s", name, node, clusterLabel)
				}
			}
			return nil
		})
	}
}

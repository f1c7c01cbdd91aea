// Command helmtool runs the helm commands the chart's tests use (template,
// lint, package, show chart) through helm's Go packages: the chart loader,
// the template engine, values and schema validation (chartutil), the linter
// and the manifest sorter, pinned in this module's go.mod at the Makefile's
// HELM_VERSION (a test holds the two equal). make test runs the chart's tests
// with it instead of the helm binary: building helm from source was the
// largest step of a cold make test, and what it adds (the command line,
// plugins, registry and cluster clients) is not what the tests exercise.
// make helm still builds the real binary, for make chart and make e2e-k8s.
//
// The glue of pkg/action (which this module cannot build: its kubectl wants
// the older k8s.io/api helm pins) is repeated here step for step from
// helm v3.19.2, each function naming what it follows. Only the flags the
// tests and the Makefile pass are known; any other flag is an error, so a
// test cannot silently lose an option helm would have applied.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	helmlint "helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: helmtool template|lint|package|show chart [ARGS]")
	}
	switch args[0] {
	case "template":
		return template(args[1:], out)
	case "lint":
		return lint(args[1:], out)
	case "package":
		return pkg(args[1:], out)
	case "show":
		if len(args) < 2 || args[1] != "chart" {
			return errors.New("usage: helmtool show chart CHART")
		}
		return showChart(args[2:], out)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// flags are the parsed options of one command, helm's spelling.
type flags struct {
	positional []string
	namespace  string
	valueFiles []string
	sets       []string
	apis       []string
	kube       string
	strict     bool
	version    string
	appVersion string
	dest       string
}

// shorthands are helm's one-letter names of the flags helmtool knows.
var shorthands = map[string]string{"n": "namespace", "f": "values", "a": "api-versions", "d": "destination"}

// parse reads helm-style arguments: flags and positional arguments in any
// order, --flag value or --flag=value, repeatable list flags (comma-separated
// like helm's string slices). allowed names the flags the command takes.
func parse(args []string, allowed ...string) (*flags, error) {
	f := &flags{namespace: "default", dest: "."}
	known := map[string]bool{}
	for _, name := range allowed {
		known[name] = true
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if !strings.HasPrefix(arg, "-") {
			f.positional = append(f.positional, arg)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if long, ok := shorthands[name]; ok {
			name = long
		}
		if !known[name] {
			return nil, fmt.Errorf("unknown flag %s (helmtool takes %v)", arg, allowed)
		}
		if name == "strict" {
			f.strict = !hasValue || value == "true"
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return nil, fmt.Errorf("flag %s needs a value", arg)
			}
			i++
			value = args[i]
		}
		switch name {
		case "namespace":
			f.namespace = value
		case "values":
			f.valueFiles = append(f.valueFiles, strings.Split(value, ",")...)
		case "set":
			f.sets = append(f.sets, value)
		case "api-versions":
			f.apis = append(f.apis, strings.Split(value, ",")...)
		case "kube-version":
			f.kube = value
		case "version":
			f.version = value
		case "app-version":
			f.appVersion = value
		case "destination":
			f.dest = value
		}
	}
	return f, nil
}

// kubeVersion is --kube-version as cmd/helm parses it.
func (f *flags) kubeVersion() (*chartutil.KubeVersion, error) {
	if f.kube == "" {
		return nil, nil
	}
	v, err := chartutil.ParseKubeVersion(f.kube)
	if err != nil {
		return nil, fmt.Errorf("invalid kube version '%s': %s", f.kube, err)
	}
	return v, nil
}

// vals follows pkg/cli/values.Options.MergeValues for local --values files
// and --set.
func (f *flags) vals() (map[string]any, error) {
	base := map[string]any{}
	for _, file := range f.valueFiles {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		current := map[string]any{}
		if err := yaml.Unmarshal(data, &current); err != nil {
			return nil, fmt.Errorf("failed to parse %s: %w", file, err)
		}
		base = mergeMaps(base, current)
	}
	for _, value := range f.sets {
		if err := strvals.ParseInto(value, base); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %w", err)
		}
	}
	return base, nil
}

// mergeMaps is pkg/cli/values' mergeMaps: b over a, maps merged key by key.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if v, ok := v.(map[string]any); ok {
			if bv, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(bv, v)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// template is helm template NAME CHART: cmd/helm's runInstall and
// action.Install.RunWithContext in client-only dry-run mode, then
// renderResources, printed as cmd/helm/template.go prints the release.
func template(args []string, out io.Writer) error {
	f, err := parse(args, "namespace", "values", "set", "api-versions", "kube-version")
	if err != nil {
		return err
	}
	if len(f.positional) != 2 {
		return errors.New("usage: helmtool template NAME CHART [flags]")
	}
	name := f.positional[0]
	kube, err := f.kubeVersion()
	if err != nil {
		return err
	}
	vals, err := f.vals()
	if err != nil {
		return err
	}
	ch, err := loader.Load(f.positional[1])
	if err != nil {
		return err
	}
	switch ch.Metadata.Type { // runInstall's checkIfInstallable
	case "", "application":
	default:
		return fmt.Errorf("%s charts are not installable", ch.Metadata.Type)
	}
	if ch.Metadata.Dependencies != nil {
		return errors.New("helmtool does not resolve chart dependencies")
	}
	if err := chartutil.ValidateReleaseName(name); err != nil { // availableName
		return fmt.Errorf("release name %q: %w", name, err)
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	if kube != nil {
		caps.KubeVersion = *kube
	}
	caps.APIVersions = append(caps.APIVersions, f.apis...)
	options := chartutil.ReleaseOptions{Name: name, Namespace: f.namespace, Revision: 1, IsInstall: true}
	values, err := chartutil.ToRenderValuesWithSchemaValidation(ch, vals, options, caps, false)
	if err != nil {
		return err
	}
	// renderResources
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", ch.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	var e engine.Engine
	files, err := e.Render(ch, values)
	if err != nil {
		return err
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") { // the notes are not printed

			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return err
	}
	var doc strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&doc, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	fmt.Fprintln(out, strings.TrimSpace(doc.String()))
	for _, hook := range hooks {
		fmt.Fprintf(out, "---\n# Source: %s\n%s\n", hook.Path, hook.Manifest)
	}
	return nil
}

// lint is helm lint [--strict] CHART: action.Lint.Run on a chart directory,
// failing on an error (with --strict also on a warning), printed as
// cmd/helm/lint.go prints it.
func lint(args []string, out io.Writer) error {
	f, err := parse(args, "strict", "namespace", "values", "set", "kube-version")
	if err != nil {
		return err
	}
	if len(f.positional) == 0 {
		f.positional = []string{"."}
	}
	kube, err := f.kubeVersion()
	if err != nil {
		return err
	}
	vals, err := f.vals()
	if err != nil {
		return err
	}
	tolerance := support.ErrorSev
	if f.strict {
		tolerance = support.WarningSev
	}
	failed := 0
	for _, dir := range f.positional {
		fmt.Fprintf(out, "==> Linting %s\n", dir)
		if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
			fmt.Fprintf(out, "Error unable to check Chart.yaml file in chart: %v\n\n", err)
			failed++
			continue
		}
		linter := helmlint.AllWithKubeVersionAndSchemaValidation(dir, vals, f.namespace, kube, false)
		bad := false
		for _, msg := range linter.Messages {
			fmt.Fprintf(out, "%s\n", msg)
			bad = bad || msg.Severity >= tolerance
		}
		if bad {
			failed++
		}
		fmt.Fprintln(out)
	}
	summary := fmt.Sprintf("%d chart(s) linted, %d chart(s) failed", len(f.positional), failed)
	if failed > 0 {
		return errors.New(summary)
	}
	fmt.Fprintln(out, summary)
	return nil
}

// pkg is helm package CHART --version V --app-version V --destination DIR:
// action.Package.Run without signing.
func pkg(args []string, out io.Writer) error {
	f, err := parse(args, "version", "app-version", "destination")
	if err != nil {
		return err
	}
	if len(f.positional) == 0 {
		return errors.New("need at least one argument, the path to the chart")
	}
	for _, dir := range f.positional {
		ch, err := loader.LoadDir(dir)
		if err != nil {
			return err
		}
		if f.version != "" {
			ch.Metadata.Version = f.version
		}
		if _, err := semver.NewVersion(ch.Metadata.Version); err != nil {
			return err
		}
		if f.appVersion != "" {
			ch.Metadata.AppVersion = f.appVersion
		}
		if ch.Metadata.Dependencies != nil {
			return errors.New("helmtool does not resolve chart dependencies")
		}
		saved, err := chartutil.Save(ch, f.dest)
		if err != nil {
			return fmt.Errorf("failed to save: %w", err)
		}
		fmt.Fprintf(out, "Successfully packaged chart and saved it to: %s\n", saved)
	}
	return nil
}

// showChart is helm show chart CHART (action.Show, ShowChart): the chart's
// metadata as YAML.
func showChart(args []string, out io.Writer) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if len(f.positional) != 1 {
		return errors.New("usage: helmtool show chart CHART")
	}
	ch, err := loader.Load(f.positional[0])
	if err != nil {
		return err
	}
	data, err := yaml.Marshal(ch.Metadata)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", data)
	return err
}

package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"github.com/joho/godotenv"
)

// ConfigFiles are the daemon's configuration files, where each family's
// package installs it: the unit reads them with EnvironmentFile=, and the
// operator commands read the first that exists, so that `sudo zfs-csi
// volumes` sees the parent datasets the daemon serves. ZFS_CSI_CONFIG names
// another file instead (a daemon run by hand, or a test).
func ConfigFiles() []string {
	if file := os.Getenv("ZFS_CSI_CONFIG"); file != "" {
		return []string{file}
	}
	return []string{"/etc/default/zfs-csi", "/etc/sysconfig/zfs-csi"}
}

// ConfigError is a flag, variable or configuration file value that does not
// parse or does not make sense. Every command exits with ExitConfig for it.
type ConfigError struct{ Err error }

// ExitConfig is sysexits' EX_CONFIG, the status of a ConfigError: the unit's
// RestartPreventExitStatus=78 keeps systemd from retrying a daemon whose
// settings are wrong.
const ExitConfig = 78

func (e ConfigError) Error() string { return e.Err.Error() }
func (e ConfigError) Unwrap() error { return e.Err }

// Source is where a command's settings come from besides its command line:
// the environment, and for the operator commands the daemon's
// configuration file under it. The command line wins over both, the
// environment over the file.
type Source struct {
	// File is the configuration file read, "" when there is none.
	File   string
	looked []string // the files looked for, nil when none were
	values map[string]string
	lookup func(string) (string, bool)
	// environ lists the environment's variables, for Unknown.
	environ func() []string
	// units are the files the units' EnvironmentFile= reads: a variable of
	// the environment is traced to the line of one that sets its value.
	units []string
}

// Environment is the process environment alone: the daemon's and the
// bridge's source (systemd has put the units' EnvironmentFile there; an
// error traces a value to its line in ConfigFiles).
func Environment() Source {
	return Source{lookup: os.LookupEnv, environ: os.Environ, units: ConfigFiles()}
}

// EnvironmentAndFile is the environment over the first of files that
// exists. The file has systemd's EnvironmentFile syntax, read with godotenv:
// KEY=value lines, # comments, single or double quotes. godotenv also takes
// what systemd does not (an "export " prefix, a comment after an unquoted
// value) and systemd what godotenv does not (";" comment lines, a line
// continued with "\"); the shipped file uses neither.
func EnvironmentAndFile(files ...string) (Source, error) {
	source := Source{lookup: os.LookupEnv, environ: os.Environ}
	source.looked = files
	for _, file := range files {
		values, err := godotenv.Read(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return source, ConfigError{Err: fmt.Errorf("reading %s: %w", file, err)}
		}
		source.File, source.values = file, values
		break
	}
	return source, nil
}

// Origin is where a setting's value came from.
type Origin struct {
	// Variable is the environment variable or file key that set it, ""
	// for the command line or the flag's default.
	Variable string
	// File and Line are the configuration file line that set it: the file
	// read, or for a variable of the environment a unit's EnvironmentFile
	// that sets the same value there; "" and 0 when none is known.
	File string
	Line int
	// Environment is true for a variable of the process environment.
	Environment bool
}

// Lookup is a variable's value and where it came from.
func (s Source) Lookup(name string) (value string, origin Origin, ok bool) {
	if s.lookup != nil {
		if value, ok := s.lookup(name); ok {
			origin := Origin{Variable: name, Environment: true}
			origin.File, origin.Line = lineSetting(s.units, name, value)
			return value, origin, true
		}
	}
	if value, ok := s.values[name]; ok {
		_, line := lineSetting([]string{s.File}, name, value)
		return value, Origin{Variable: name, File: s.File, Line: line}, true
	}
	return "", Origin{}, false
}

// lineSetting finds the last line of files that sets variable to value, as
// systemd reads EnvironmentFile= lines in order, each over the one before.
// One line is read at a time: a value quoted across lines is not found.
func lineSetting(files []string, variable, value string) (file string, line int) {
	for _, candidate := range files {
		contents, err := os.ReadFile(candidate)
		if err != nil {
			continue
		}
		for number, text := range strings.Split(string(contents), "\n") {
			key, _, found := strings.Cut(strings.TrimPrefix(strings.TrimSpace(text), "export "), "=")
			if !found || strings.TrimSpace(key) != variable {
				continue
			}
			if parsed, err := godotenv.Unmarshal(text); err == nil && parsed[variable] == value {
				file, line = candidate, number+1
			}
		}
	}
	return file, line
}

// Describe says where the settings were read, for an error about one
// that is missing or wrong.
func (s Source) Describe() string {
	switch {
	case s.File != "":
		return "settings read from the command line, the environment and " + s.File
	case s.looked != nil:
		return "settings read from the command line and the environment; no configuration file at " + strings.Join(s.looked, " or ") +
			" (ZFS_CSI_CONFIG names another)"
	}
	return "settings read from the command line and the environment"
}

// variablePattern finds the variable a flag's usage names: "[NAME]" or
// "[NAME, comma-separated]" at its end.
var variablePattern = regexp.MustCompile(`\s*\[([A-Z][A-Z0-9_]*)(, comma-separated)?\]$`)

// UsageVariable splits a flag's usage into its text and the environment
// variable it names ("" for none), and says whether the variable is a
// comma-separated list: the one reading of the convention, for Apply and
// for the manual page.
func UsageVariable(usage string) (text, variable string, list bool) {
	match := variablePattern.FindStringSubmatch(usage)
	if match == nil {
		return usage, "", false
	}
	return strings.TrimSuffix(usage, match[0]), match[1], match[2] != ""
}

// Apply sets every flag the command line left alone from the variable its
// usage names, through the flag's own parser: a value it refuses is a
// ConfigError naming the variable and where it was set, never a silent
// default. A comma-separated variable sets a repeatable flag once per item.
func (s Source) Apply(flags *flag.FlagSet) error { return s.apply(flags, nil) }

// apply is Apply, the first refusal a SettingError saying what rules allow.
func (s Source) apply(flags *flag.FlagSet, rules []Rule) error {
	given := commandLine(flags)
	var problem error
	flags.VisitAll(func(f *flag.Flag) {
		_, variable, list := UsageVariable(f.Usage)
		if problem != nil || variable == "" || given[f.Name] {
			return
		}
		value, origin, ok := s.Lookup(variable)
		if !ok {
			return
		}
		items := []string{value}
		if list {
			items = nil
			for _, item := range strings.Split(value, ",") {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
		}
		for _, item := range items {
			if err := f.Value.Set(item); err != nil {
				problem = ConfigError{Err: SettingError{Flag: f.Name, Value: value, Origin: origin, Allowed: allowed(rules, f.Name), Reason: err}}
				return
			}
		}
	})
	return problem
}

// commandLine is the flags the command line set.
func commandLine(flags *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return given
}

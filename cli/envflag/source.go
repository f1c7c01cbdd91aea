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
}

// Environment is the process environment alone: the daemon's source
// (systemd has put the unit's EnvironmentFile there).
func Environment() Source { return Source{lookup: os.LookupEnv} }

// EnvironmentAndFile is the environment over the first of files that
// exists. The file has systemd's EnvironmentFile syntax, read with godotenv:
// KEY=value lines, # comments, single or double quotes. godotenv also takes
// what systemd does not (an "export " prefix, a comment after an unquoted
// value) and systemd what godotenv does not (";" comment lines, a line
// continued with "\"); the shipped file uses neither.
func EnvironmentAndFile(files ...string) (Source, error) {
	source := Environment()
	source.looked = files
	for _, file := range files {
		values, err := godotenv.Read(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return source, ConfigError{fmt.Errorf("reading %s: %w", file, err)}
		}
		source.File, source.values = file, values
		break
	}
	return source, nil
}

// Lookup is a variable's value and where it came from.
func (s Source) Lookup(name string) (value, origin string, ok bool) {
	if s.lookup != nil {
		if value, ok := s.lookup(name); ok {
			return value, "the environment", true
		}
	}
	if value, ok := s.values[name]; ok {
		return value, s.File, true
	}
	return "", "", false
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
func (s Source) Apply(flags *flag.FlagSet) error {
	given := map[string]bool{}
	flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var problems []error
	flags.VisitAll(func(f *flag.Flag) {
		_, variable, list := UsageVariable(f.Usage)
		if variable == "" || given[f.Name] {
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
				problems = append(problems, fmt.Errorf("%s=%q (from %s) is not a valid value for --%s: %v", variable, value, origin, f.Name, err))
				return
			}
		}
	})
	if len(problems) > 0 {
		return ConfigError{errors.Join(problems...)}
	}
	return nil
}

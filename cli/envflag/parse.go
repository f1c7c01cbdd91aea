package envflag

// Parse: how the daemon and the Nomad bridge read their settings, so that a
// wrong one stops them at once with one line that says which it is, where
// it was set and what it may be, whichever source it came from.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// SettingError is one setting whose value is not allowed.
type SettingError struct {
	Flag  string
	Value string
	// Origin is where Value came from; the zero Origin with Default false
	// is the command line.
	Origin Origin
	// Default is true when nothing set the flag and its default is wrong
	// (a directory that does not exist, a required value that is empty).
	Default bool
	// Where says where the settings were read (Source.Describe), for a
	// default: the operator may have meant to set it somewhere.
	Where string
	// Allowed is what the rule allows, "" when no rule says.
	Allowed string
	Reason  error
}

// Error is one line: the setting and where it was set, why its value is
// refused, what is allowed.
func (e SettingError) Error() string {
	var line strings.Builder
	origin := e.Origin
	switch {
	case e.Default && e.Value == "":
		fmt.Fprintf(&line, "--%s%s is not set", e.Flag, variableOf(origin))
	case e.Default:
		fmt.Fprintf(&line, "--%s%s is not set, its default %q", e.Flag, variableOf(origin), e.Value)
	case origin.Environment && origin.File != "":
		fmt.Fprintf(&line, "variable %s %q (%s:%d, --%s)", origin.Variable, e.Value, origin.File, origin.Line, e.Flag)
	case origin.Environment:
		fmt.Fprintf(&line, "variable %s %q (--%s)", origin.Variable, e.Value, e.Flag)
	case origin.File != "":
		fmt.Fprintf(&line, "%s:%d: %s %q (--%s)", origin.File, origin.Line, origin.Variable, e.Value, e.Flag)
	default:
		fmt.Fprintf(&line, "flag --%s %q", e.Flag, e.Value)
	}
	var parts []string
	if e.Reason != nil && e.Reason.Error() != "parse error" && !errors.Is(e.Reason, ErrNotAllowed) {
		parts = append(parts, e.Reason.Error())
	}
	if e.Allowed != "" {
		parts = append(parts, "must be "+e.Allowed)
	}
	if len(parts) == 0 {
		parts = append(parts, "not a value --"+e.Flag+" takes")
	}
	line.WriteString(": " + strings.Join(parts, "; "))
	if e.Default && e.Where != "" {
		fmt.Fprintf(&line, " (%s)", e.Where)
	}
	return strings.ReplaceAll(line.String(), "\n", "; ")
}

func variableOf(origin Origin) string {
	if origin.Variable == "" {
		return ""
	}
	return " (" + origin.Variable + ")"
}

// UsageError is a command line that is wrong: a flag the command does not
// have, a flag's value that does not parse, arguments where none belong.
// The commands follow its message with one line that points to -h.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Parse parses a command's arguments, sets from source every flag they left
// alone (Apply), then holds each flag to its rule, in the rules' order. It
// returns the first refusal as a ConfigError whose message is one line
// (SettingError; a UsageError when the command line itself is wrong), and
// flag.ErrHelp after writing the usage to help when -h was asked.
func Parse(flags *flag.FlagSet, args []string, source Source, rules []Rule, help io.Writer) error {
	if err := parseCommandLine(flags, args, rules, help); err != nil {
		return err
	}
	if err := source.apply(flags, rules); err != nil {
		return err
	}
	return source.check(flags, rules)
}

// check holds each flag to its rule, in the rules' order, and says where a
// refused value came from.
func (s Source) check(flags *flag.FlagSet, rules []Rule) error {
	given := commandLine(flags)
	for _, rule := range rules {
		f := flags.Lookup(rule.Flag)
		if f == nil {
			panic("envflag: a rule for a flag the set does not declare: " + rule.Flag)
		}
		if rule.Test == nil {
			continue
		}
		var value any = f.Value.String()
		if getter, ok := f.Value.(flag.Getter); ok {
			value = getter.Get()
		}
		if err := rule.Test(value); err != nil {
			problem := SettingError{Flag: f.Name, Value: f.Value.String(), Allowed: rule.Allowed, Reason: err}
			if given[f.Name] {
				return ConfigError{Err: UsageError{Err: problem}}
			}
			_, variable, _ := UsageVariable(f.Usage)
			var found bool
			if _, problem.Origin, found = s.Lookup(variable); !found {
				problem.Origin, problem.Default, problem.Where = Origin{Variable: variable}, true, s.Describe()
			}
			return ConfigError{Err: problem}
		}
	}
	return nil
}

// parseCommandLine parses args without the flag package's usage dump: a
// flag's value it refuses is a SettingError, any other mistake a
// UsageError with the nearest flag's name when one is near.
func parseCommandLine(flags *flag.FlagSet, args []string, rules []Rule, help io.Writer) error {
	var refused *SettingError
	flags.VisitAll(func(f *flag.Flag) { f.Value = recordRefusal(f, &refused) })
	flags.SetOutput(io.Discard)
	usage := flags.Usage
	flags.Usage = func() {}
	err := flags.Parse(args)
	flags.VisitAll(func(f *flag.Flag) { f.Value = f.Value.(unwrapper).unwrap() })
	flags.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		flags.SetOutput(help)
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(help, "Usage of %s:\n", flags.Name())
			flags.PrintDefaults()
		}
		return err
	case err != nil && refused != nil:
		refused.Allowed = allowed(rules, refused.Flag)
		return ConfigError{Err: UsageError{Err: *refused}}
	case err != nil:
		return ConfigError{Err: UsageError{Err: fmt.Errorf("%v%s", err, nearestFlag(flags, err))}}
	case flags.NArg() > 0:
		return ConfigError{Err: UsageError{Err: fmt.Errorf("unexpected arguments %q", flags.Args())}}
	}
	return nil
}

// recordRefusal wraps a flag's value so that the first value its parser
// refuses is kept, with the flag it was for.
func recordRefusal(f *flag.Flag, refused **SettingError) flag.Value {
	value := &recordingValue{Value: f.Value, name: f.Name, refused: refused}
	if boolean, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && boolean.IsBoolFlag() {
		return recordingBool{value}
	}
	return value
}

type unwrapper interface{ unwrap() flag.Value }

type recordingValue struct {
	flag.Value
	name    string
	refused **SettingError
}

func (v *recordingValue) unwrap() flag.Value { return v.Value }

func (v *recordingValue) Set(value string) error {
	err := v.Value.Set(value)
	if err != nil && *v.refused == nil {
		*v.refused = &SettingError{Flag: v.name, Value: value, Reason: err}
	}
	return err
}

type recordingBool struct{ *recordingValue }

func (recordingBool) IsBoolFlag() bool { return true }

func allowed(rules []Rule, flagName string) string {
	for _, rule := range rules {
		if rule.Flag == flagName {
			return rule.Allowed
		}
	}
	return ""
}

// nearestFlag suggests the flag nearest to one the command does not have.
func nearestFlag(flags *flag.FlagSet, err error) string {
	typed, found := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !found {
		return ""
	}
	var names []string
	flags.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if nearest := Nearest(strings.TrimLeft(typed, "-"), names); nearest != "" {
		return " (did you mean --" + nearest + "?)"
	}
	return ""
}

// FlagVariables are the variables a flag set's usages name.
func FlagVariables(flags *flag.FlagSet) []string {
	var variables []string
	flags.VisitAll(func(f *flag.Flag) {
		if _, variable, _ := UsageVariable(f.Usage); variable != "" {
			variables = append(variables, variable)
		}
	})
	return variables
}

// Unknown refuses a variable of the environment that starts with prefix
// and is none of known, nor starts with one of reserved: a misspelt
// setting would otherwise be ignored without a word. The error names the
// nearest known variable when one is near.
func (s Source) Unknown(prefix string, known, reserved []string) error {
	if s.environ == nil {
		return nil
	}
	var unknown []string
	for _, entry := range s.environ() {
		name, _, _ := strings.Cut(entry, "=")
		if !strings.HasPrefix(name, prefix) || slices.Contains(known, name) ||
			slices.ContainsFunc(reserved, func(r string) bool { return strings.HasPrefix(name, r) }) {
			continue
		}
		unknown = append(unknown, name)
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	name := unknown[0]
	_, origin, _ := s.Lookup(name)
	where := ""
	if origin.File != "" {
		where = fmt.Sprintf(" (%s:%d)", origin.File, origin.Line)
	}
	suggestion := ""
	if nearest := Nearest(name, known); nearest != "" {
		suggestion = "; did you mean " + nearest + "?"
	}
	return ConfigError{Err: fmt.Errorf("variable %s%s is not a setting of zfs-csi%s", name, where, suggestion)}
}

// Nearest is the word of words nearest to typed by edit distance, "" when
// none is near enough to be what was meant.
func Nearest(typed string, words []string) string {
	best, bestDistance := "", min(3, len(typed)/2)+1
	for _, word := range words {
		if distance := EditDistance(typed, word); distance < bestDistance {
			best, bestDistance = word, distance
		}
	}
	return best
}

// EditDistance is the Levenshtein distance of two short words.
func EditDistance(a, b string) int {
	previous := make([]int, len(b)+1)
	for j := range previous {
		previous[j] = j
	}
	for i := 1; i <= len(a); i++ {
		current := make([]int, len(b)+1)
		current[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			current[j] = min(previous[j]+1, current[j-1]+1, previous[j-1]+cost)
		}
		previous = current
	}
	return previous[len(b)]
}

package main

// The daemon's JSON log, read back: the growth section times the reaper and
// the metrics read by the lines the daemon logs for them, and replays the
// zfs commands it logged.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// waitForLog waits until the daemon's log has more than seen lines with
// message, and returns the first new one; a "failed" warning of the
// metrics read ends the wait with its error.
func waitForLog(ctx context.Context, path, message string, seen int, within time.Duration) (logLine, error) {
	deadline := time.Now().Add(within)
	for {
		lines, err := readLog(path, message)
		if err != nil {
			return logLine{}, err
		}
		if len(lines) > seen {
			return lines[seen], nil
		}
		failed, err := readLog(path, "metrics: reading pools and volumes failed")
		if err != nil {
			return logLine{}, err
		}
		if len(failed) > 0 {
			return logLine{}, fmt.Errorf("the daemon logged: metrics: reading pools and volumes failed after %.0f ms", failed[len(failed)-1].Duration)
		}
		if time.Now().After(deadline) {
			return logLine{}, fmt.Errorf("no %q in %s within %s", message, path, within)
		}
		select {
		case <-ctx.Done():
			return logLine{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// logLine is the part of the daemon's JSON log lines the section reads.
type logLine struct {
	Message  string   `json:"message"`
	Argv     []string `json:"argv"`
	Duration float64  `json:"duration"` // milliseconds (zerolog's Dur)
}

// readLog decodes the daemon's JSON log lines that have the message (all of
// them for "").
func readLog(path, message string) ([]logLine, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var lines []logLine
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		var line logLine
		if json.Unmarshal(scanner.Bytes(), &line) == nil && (message == "" || line.Message == message) {
			lines = append(lines, line)
		}
	}
	return lines, scanner.Err()
}

// loggedCommands are the argv of every zfs and zpool command the daemon
// logged (at debug level), in order.
func loggedCommands(path string) ([][]string, error) {
	lines, err := readLog(path, "zfs command")
	if err != nil {
		return nil, err
	}
	commands := make([][]string, 0, len(lines))
	for _, line := range lines {
		commands = append(commands, line.Argv)
	}
	return commands, nil
}

// reaperRun is one sweep or pass of the reaper as the daemon logged it:
// its duration, and its zfs commands: for the sweep its listing, for a pass
// every command logged between the sweep's line and its own (the daemon
// runs nothing else while the bench waits for them).
type reaperRun struct {
	took     time.Duration
	commands [][]string
}

// reaperRuns waits for the daemon's reaper sweep (at start) and, when
// wantPass, for the pass after it.
func reaperRuns(ctx context.Context, path string, wantPass bool) (sweep, pass reaperRun, err error) {
	deadline := time.Now().Add(30 * time.Minute)
	for {
		lines, err := readLog(path, "")
		if err != nil {
			return sweep, pass, err
		}
		var commands [][]string
		swept := false
		for _, line := range lines {
			switch {
			case line.Message == "zfs command":
				commands = append(commands, line.Argv)
			case line.Message == "reaper sweep":
				// Its one zfs list: the last before it (the start-up's
				// own reads come before).
				var list []string
				for _, argv := range commands {
					if len(argv) > 1 && argv[1] == "list" {
						list = argv
					}
				}
				if list == nil {
					return sweep, pass, fmt.Errorf("%s: a reaper sweep without a zfs list before it", path)
				}
				sweep, commands, swept = reaperRun{took: logged(line), commands: [][]string{list}}, nil, true
				if !wantPass {
					return sweep, pass, nil
				}
			case line.Message == "reaper pass" && swept:
				return sweep, reaperRun{took: logged(line), commands: commands}, nil
			case strings.HasPrefix(line.Message, "reaper ") && strings.HasSuffix(line.Message, " failed"):
				return sweep, pass, fmt.Errorf("%s: the daemon logged %q", path, line.Message)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return sweep, pass, fmt.Errorf("%s logs no reaper sweep (and pass) after 30 minutes", path)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logged is a log line's duration.
func logged(line logLine) time.Duration {
	return time.Duration(line.Duration * float64(time.Millisecond))
}

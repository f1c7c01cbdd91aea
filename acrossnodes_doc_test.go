package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// docs/across-nodes.md shows the move as commands; the guest runs them
// (e2e/tests TestAVolumeInUseMovesInRoundsAsTheDocsShow, its moveCommands):
// the two must be the same lines.
func TestTheMoveTheDocsShowIsTheOneTheGuestRuns(t *testing.T) {
	doc, err := os.ReadFile("docs/across-nodes.md")
	if err != nil {
		t.Fatal(err)
	}
	test, err := os.ReadFile("e2e/tests/transfer_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)## Moving a volume.*?```sh\n(.*?)```").FindSubmatch(doc)
	constant := regexp.MustCompile("(?s)const moveCommands = `(.*?)`").FindSubmatch(test)
	if block == nil || constant == nil {
		t.Fatalf("found the docs' block: %v, the test's constant: %v", block != nil, constant != nil)
	}
	if shown, run := strings.TrimSpace(string(block[1])), strings.TrimSpace(string(constant[1])); shown != run {
		t.Errorf("docs/across-nodes.md shows\n%s\nthe guest runs\n%s", shown, run)
	}
}

package rpc

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// wantCodes is what each typed error of package zfs must become, written here
// apart from zfsCodes so that a row deleted or changed there fails.
var wantCodes = map[string]struct {
	err  error
	code codes.Code
}{
	"ErrNotFound":          {zfs.ErrNotFound, codes.NotFound},
	"ErrExists":            {zfs.ErrExists, codes.AlreadyExists},
	"ErrBusy":              {zfs.ErrBusy, codes.FailedPrecondition},
	"ErrHasDependents":     {zfs.ErrHasDependents, codes.FailedPrecondition},
	"ErrNoSpace":           {zfs.ErrNoSpace, codes.ResourceExhausted},
	"ErrInvalid":           {zfs.ErrInvalid, codes.InvalidArgument},
	"ErrPoolSuspended":     {zfs.ErrPoolSuspended, codes.Unavailable},
	"ErrPoolNotFound":      {zfs.ErrPoolNotFound, codes.Unavailable},
	"ErrPermission":        {zfs.ErrPermission, codes.PermissionDenied},
	"ErrParentMissing":     {zfs.ErrParentMissing, codes.FailedPrecondition},
	"ErrHeld":              {zfs.ErrHeld, codes.FailedPrecondition},
	"ErrReadOnlyPool":      {zfs.ErrReadOnlyPool, codes.FailedPrecondition},
	"ErrCrossPool":         {zfs.ErrCrossPool, codes.InvalidArgument},
	"ErrIO":                {zfs.ErrIO, codes.Unavailable},
	"ErrProgram":           {zfs.ErrProgram, codes.Internal},
	"ErrStream":            {zfs.ErrStream, codes.Internal},
	"ErrRefusedStream":     {zfs.ErrRefusedStream, codes.PermissionDenied},
	"ErrKeyRejected":       {zfs.ErrKeyRejected, codes.InvalidArgument},
	"ErrKeyLoaded":         {zfs.ErrKeyLoaded, codes.FailedPrecondition},
	"ErrNotEncryptionRoot": {zfs.ErrNotEncryptionRoot, codes.FailedPrecondition},
	"ErrKeyUnavailable":    {zfs.ErrKeyUnavailable, codes.FailedPrecondition},
	"ErrUnsupported":       {zfs.ErrUnsupported, codes.FailedPrecondition},
}

// exportedErrors lists the exported package-level Err… variables declared in
// package zfs's source, so that a new one cannot go unmapped unnoticed.
func exportedErrors(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../zfs/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if name.IsExported() && strings.HasPrefix(name.Name, "Err") {
						names = append(names, name.Name)
					}
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("found no Err… variables in ../zfs: is the parse looking in the right place?")
	}
	slices.Sort(names)
	return names
}

func TestEveryTypedZFSErrorHasItsRowAndCode(t *testing.T) {
	exported := exportedErrors(t)
	for _, name := range exported {
		t.Run(name, func(t *testing.T) {
			want, known := wantCodes[name]
			if !known {
				t.Fatalf("package zfs exports %s, which neither zfsCodes nor this test maps: add a row to both", name)
			}
			if _, ok := codeOf(want.err); !ok {
				t.Errorf("zfsCodes has no row for zfs.%s, so it would fall to INTERNAL by default", name)
			}
			// As handlers see them: from a command, wrapped in context.
			wrapped := fmt.Errorf("volume %q: %w", "pvc-1", &zfs.CommandError{Argv: []string{"zfs", "create"}, Kind: want.err})
			got := Status(wrapped)
			if status.Code(got) != want.code {
				t.Errorf("Status(zfs.%s) has code %s, want %s", name, status.Code(got), want.code)
			}
			if !strings.Contains(status.Convert(got).Message(), `volume "pvc-1"`) {
				t.Errorf("Status(zfs.%s) lost the handler's words: %q", name, status.Convert(got).Message())
			}
		})
	}
	for name := range wantCodes {
		if !slices.Contains(exported, name) {
			t.Errorf("this test expects zfs.%s, which package zfs no longer exports", name)
		}
	}
}

func TestStatusMapsEachTypedError(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{&zfs.CommandError{Kind: zfs.ErrNotFound}, codes.NotFound},
		{&zfs.CommandError{Kind: zfs.ErrExists}, codes.AlreadyExists},
		{&zfs.CommandError{Kind: zfs.ErrBusy}, codes.FailedPrecondition},
		{&zfs.CommandError{Kind: zfs.ErrHasDependents}, codes.FailedPrecondition},
		{&zfs.CommandError{Kind: zfs.ErrNoSpace}, codes.ResourceExhausted},
		{&zfs.CommandError{Kind: zfs.ErrInvalid}, codes.InvalidArgument},
		{&zfs.CommandError{Kind: zfs.ErrPoolSuspended}, codes.Unavailable},
		{&zfs.CommandError{Kind: zfs.ErrPermission}, codes.PermissionDenied},
		{&zfs.CommandError{}, codes.Internal},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.Join(errors.New("zfs list"), context.Canceled), codes.Canceled},
		{status.Error(codes.Aborted, "busy"), codes.Aborted},
		{fmt.Errorf("creating: %w", rules.ErrInFlight), codes.Aborted},
		{errors.New("anything else"), codes.Internal},
	}
	for _, test := range tests {
		if got := status.Code(Status(test.err)); got != test.want {
			t.Errorf("Status(%v) has code %s, want %s", test.err, got, test.want)
		}
	}
	if Status(nil) != nil {
		t.Error("Status(nil) is not nil")
	}
}

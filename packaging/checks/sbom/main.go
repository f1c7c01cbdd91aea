// Command sbom writes the software bill of materials of a zfs-csi release:
// an SPDX 2.3 JSON document naming each binary given (one a package
// architecture), the Go toolchain that built it, and every module linked
// into it, from the build information the Go linker writes into the binary
// (what `go version -m` prints), so nothing is read from the network. A
// module's licence is what its LICENSE file in the module cache (where the
// build left it) reads as, among a few well-known texts, else NOASSERTION:
// the SPDX field for a conclusion this program did not reach.
//
//	go run ./sbom -version 1.2.3 -created 2026-11-25T00:00:00Z -o zfs-csi.spdx.json BINARY...
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// options are the command line's.
type options struct {
	version  string
	created  string
	licence  string
	output   string
	binaries []string
	modCache string
}

func run(args []string) error {
	flags := flag.NewFlagSet("sbom", flag.ContinueOnError)
	var opts options
	flags.StringVar(&opts.version, "version", "", "the release's version (the packages')")
	flags.StringVar(&opts.created, "created", "", "the document's creation time, RFC 3339 (the commit's time makes it reproducible)")
	flags.StringVar(&opts.licence, "licence", "Apache-2.0", "zfs-csi's own licence, an SPDX identifier")
	flags.StringVar(&opts.output, "o", "", "where to write the document")
	if err := flags.Parse(args); err != nil {
		return err
	}
	opts.binaries = flags.Args()
	if opts.version == "" || opts.output == "" || len(opts.binaries) == 0 {
		//lint:ignore ST1005 the ellipsis is usage syntax (one binary or more), not punctuation
		return errors.New("usage: sbom -version V [-created TIME] -o FILE BINARY...")
	}
	if opts.created == "" {
		opts.created = time.Now().UTC().Format(time.RFC3339)
	}
	if _, err := time.Parse(time.RFC3339, opts.created); err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	opts.modCache = strings.TrimSpace(string(out))
	doc, err := document(opts)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(opts.output, append(data, '\n'), 0o644)
}

// The parts of SPDX 2.3 (JSON) this document uses.
type (
	spdxDocument struct {
		SPDXVersion       string             `json:"spdxVersion"`
		DataLicense       string             `json:"dataLicense"`
		SPDXID            string             `json:"SPDXID"`
		Name              string             `json:"name"`
		DocumentNamespace string             `json:"documentNamespace"`
		CreationInfo      spdxCreationInfo   `json:"creationInfo"`
		Packages          []spdxPackage      `json:"packages"`
		Relationships     []spdxRelationship `json:"relationships"`
	}
	spdxCreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		SPDXID                string            `json:"SPDXID"`
		Name                  string            `json:"name"`
		VersionInfo           string            `json:"versionInfo"`
		DownloadLocation      string            `json:"downloadLocation"`
		FilesAnalyzed         bool              `json:"filesAnalyzed"`
		LicenseConcluded      string            `json:"licenseConcluded"`
		LicenseDeclared       string            `json:"licenseDeclared"`
		CopyrightText         string            `json:"copyrightText"`
		PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
		Checksums             []spdxChecksum    `json:"checksums,omitempty"`
		ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
		Comment               string            `json:"comment,omitempty"`
	}
	spdxChecksum struct {
		Algorithm     string `json:"algorithm"`
		ChecksumValue string `json:"checksumValue"`
	}
	spdxExternalRef struct {
		ReferenceCategory string `json:"referenceCategory"`
		ReferenceType     string `json:"referenceType"`
		ReferenceLocator  string `json:"referenceLocator"`
	}
	spdxRelationship struct {
		SPDXElementID      string `json:"spdxElementId"`
		RelationshipType   string `json:"relationshipType"`
		RelatedSPDXElement string `json:"relatedSpdxElement"`
	}
)

const noAssertion = "NOASSERTION"

// document builds the SBOM: a package for each binary, one for each module
// and toolchain any of them links, and which binary depends on which.
func document(opts options) (*spdxDocument, error) {
	doc := &spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        "zfs-csi-" + opts.version,
		// Unique to the release: a version names one build of one commit.
		DocumentNamespace: "https://github.com/zfs-csi/zfs-csi/spdx/zfs-csi-" + opts.version,
		CreationInfo: spdxCreationInfo{
			Created:  opts.created,
			Creators: []string{"Organization: zfs-csi", "Tool: zfs-csi-packaging-checks-sbom"},
		},
	}
	dependencies := map[string]spdxPackage{} // by SPDXID
	for _, binary := range opts.binaries {
		info, err := buildinfo.ReadFile(binary)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", binary, err)
		}
		sum, err := fileSHA256(binary)
		if err != nil {
			return nil, err
		}
		goos, goarch := setting(info, "GOOS"), setting(info, "GOARCH")
		id := spdxID("Package-zfs-csi-" + goos + "-" + goarch)
		doc.Packages = append(doc.Packages, spdxPackage{
			SPDXID:                id,
			Name:                  "zfs-csi",
			VersionInfo:           opts.version,
			DownloadLocation:      "https://github.com/zfs-csi/zfs-csi",
			LicenseConcluded:      opts.licence,
			LicenseDeclared:       opts.licence,
			CopyrightText:         noAssertion,
			PrimaryPackagePurpose: "APPLICATION",
			Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: sum}},
			ExternalRefs: []spdxExternalRef{purl(fmt.Sprintf("pkg:golang/%s@%s?goos=%s&goarch=%s",
				info.Main.Path, opts.version, goos, goarch))},
			Comment: fmt.Sprintf("/usr/sbin/zfs-csi of the %s/%s packages, built by %s", goos, goarch, info.GoVersion),
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", id})
		toolchain := spdxPackage{
			SPDXID:           spdxID("Package-go-stdlib-" + info.GoVersion),
			Name:             "stdlib",
			VersionInfo:      info.GoVersion,
			DownloadLocation: "https://go.dev/dl/",
			LicenseConcluded: "BSD-3-Clause",
			LicenseDeclared:  "BSD-3-Clause",
			CopyrightText:    noAssertion,
			ExternalRefs:     []spdxExternalRef{purl("pkg:golang/stdlib@" + info.GoVersion)},
			Comment:          "The Go standard library and runtime, linked into the binary.",
		}
		dependencies[toolchain.SPDXID] = toolchain
		doc.Relationships = append(doc.Relationships, spdxRelationship{id, "DEPENDS_ON", toolchain.SPDXID})
		for _, dep := range info.Deps {
			pkg := modulePackage(opts, dep)
			dependencies[pkg.SPDXID] = pkg
			doc.Relationships = append(doc.Relationships, spdxRelationship{id, "DEPENDS_ON", pkg.SPDXID})
		}
	}
	for _, id := range slices.Sorted(mapKeys(dependencies)) {
		doc.Packages = append(doc.Packages, dependencies[id])
	}
	return doc, nil
}

// modulePackage is the package of one module a binary links: the module
// that replaced it, where go.mod replaces one.
func modulePackage(opts options, dep *debug.Module) spdxPackage {
	module := dep
	if dep.Replace != nil {
		module = dep.Replace
	}
	pkg := spdxPackage{
		SPDXID:                spdxID("Package-" + module.Path + "-" + module.Version),
		Name:                  module.Path,
		VersionInfo:           module.Version,
		DownloadLocation:      "https://proxy.golang.org/" + escapePath(module.Path) + "/@v/" + module.Version + ".zip",
		LicenseConcluded:      licence(opts.modCache, module.Path, module.Version),
		LicenseDeclared:       noAssertion,
		CopyrightText:         noAssertion,
		PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs:          []spdxExternalRef{purl("pkg:golang/" + module.Path + "@" + module.Version)},
	}
	if module.Sum != "" {
		pkg.Comment = "go.sum hash " + module.Sum
	}
	return pkg
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func purl(locator string) spdxExternalRef {
	return spdxExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}
}

func setting(info *buildinfo.BuildInfo, key string) string {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return "unknown"
}

// spdxID makes an SPDX identifier: letters, digits, '.' and '-' only.
func spdxID(name string) string {
	return "SPDXRef-" + strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '-') {
			return r
		}
		return '-'
	}, name)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// escapePath is the module cache's and the proxy's spelling of a module
// path: each upper-case letter as '!' and its lower case.
func escapePath(path string) string {
	var b strings.Builder
	for _, r := range path {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// licences are the texts a LICENSE file is recognised by, most specific
// first; every phrase of an entry must be there.
var licences = []struct {
	id      string
	phrases []*regexp.Regexp
}{
	{"Apache-2.0", phrases(`Apache License`, `Version 2\.0`)},
	{"MPL-2.0", phrases(`Mozilla Public License,? [Vv]ersion 2\.0`)},
	{"BSD-3-Clause", phrases(`Redistribution and use in source and binary forms`, `Neither the name`)},
	{"BSD-2-Clause", phrases(`Redistribution and use in source and binary forms`)},
	{"MIT", phrases(`Permission is hereby granted, free of charge`)},
	{"ISC", phrases(`Permission to use, copy, modify, and(/or)? distribute this software for any`)},
}

func phrases(texts ...string) []*regexp.Regexp {
	var compiled []*regexp.Regexp
	for _, text := range texts {
		compiled = append(compiled, regexp.MustCompile(strings.ReplaceAll(text, " ", `\s+`)))
	}
	return compiled
}

// licence reads a module's licence from its LICENSE file in the module
// cache, or says NOASSERTION: no such file, or none of the known texts.
func licence(modCache, path, version string) string {
	dir := filepath.Join(modCache, escapePath(path)+"@"+version)
	for _, name := range []string{"LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "COPYING"} {
		text, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		for _, l := range licences {
			if matchesAll(string(text), l.phrases) {
				return l.id
			}
		}
		return noAssertion
	}
	return noAssertion
}

func matchesAll(text string, patterns []*regexp.Regexp) bool {
	for _, p := range patterns {
		if !p.MatchString(text) {
			return false
		}
	}
	return true
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `iii bench turns` with a flag the bench refuses, or a profile of a
// phase that does not run, fails before it touches a profile file: it
// truncated an earlier profile at that path (or left an empty file) and
// only then found the flag bad.
func TestBenchRefusesBeforeProfiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"negative sessions", []string{"--sessions", "-1", "--cpuprofile", "PROF"}, "sessions -1 is negative"},
		{"bad replicas", []string{"--replicas", "2", "--memprofile", "PROF", "--idle", "1"}, "replicas 2"},
		{"cpu profile without turns", []string{"--sessions", "0", "--idle", "1", "--cpuprofile", "PROF"}, "--cpuprofile"},
		{"heap profile without idle", []string{"--memprofile", "PROF"}, "--memprofile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			prof := filepath.Join(dir, "old.prof")
			if err := os.WriteFile(prof, []byte("an earlier profile"), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"bench", "turns", "-q"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "PROF", prof))
			}
			out, err := runIII(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("iii %q: %v, want an error saying %s\n%s", args, err, tc.want, out)
			}
			if b, _ := os.ReadFile(prof); string(b) != "an earlier profile" {
				t.Fatalf("the earlier profile became %q", b)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("files left beside the profile: %v", ents)
			}
		})
	}
}

// A profile file holds a profile only once one was written: one that
// got nothing is removed and leaves an earlier profile at its path as it
// was.
func TestProfileFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.prof")
	if err := os.WriteFile(path, []byte("earlier"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := createProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.finish(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "earlier" {
		t.Fatalf("an empty profile replaced the earlier one: %q", b)
	}
	p, err = createProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("profile")); err != nil {
		t.Fatal(err)
	}
	if err := p.finish(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "profile" {
		t.Fatalf("the profile is %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files left beside the profile: %v", ents)
	}
}

package fstool

import (
	"path"
	"strings"
	"testing"
)

func TestIsTempFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want bool
	}{
		{".main.go.fstool-ABCDEFGH2345.tmp", true},
		{".a.fstool-ZZZZZZZZZZZZ.tmp", true},
		{"." + strings.Repeat("x", 128) + ".fstool-AAAAAAAAAAAA.tmp", true},
		{".é.fstool-AAAAAAAAAAAA.tmp", true},
		{".a.fstool-AAAAAAAAAAAA.fstool-AAAAAAAAAAAA.tmp", true}, // a temp file's own temp file
		{"." + strings.Repeat("x", 129) + ".fstool-AAAAAAAAAAAA.tmp", false},
		{".fstool-AAAAAAAAAAAA.tmp", false},     // no name
		{"a.fstool-AAAAAAAAAAAA.tmp", false},    // no leading dot
		{".a.fstool-aaaaaaaaaaaa.tmp", false},   // lower case
		{".a.fstool-AAAAAAAAAAA1.tmp", false},   // not base32
		{".a.fstool-AAAAAAAAAAAAA.tmp", false},  // 13 characters
		{".a.fstool-AAAAAAAAAAA.tmp", false},    // 11 characters
		{".a.fstool-AAAAAAAAAAAA.tmp.x", false}, // suffix
		{".a.fstool-AAAAAAAAAAAA", false},       // no .tmp
		{".a.fstool_AAAAAAAAAAAA.tmp", false},   // another infix
		{".a/b.fstool-AAAAAAAAAAAA.tmp", false}, // a path, not a name
		{"notes.tmp", false},
		{"", false},
		{".tmp", false},
	}
	for _, tt := range tests {
		if got := IsTempFile(tt.name); got != tt.want {
			t.Errorf("IsTempFile(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Every name writeAtomic makes is one IsTempFile knows, and sits beside
// its target.
func TestTempNameIsTempFile(t *testing.T) {
	t.Parallel()
	for _, rel := range []string{"a", "main.go", "src/deep/x.txt", ".hidden", strings.Repeat("y", 200), "d/" + strings.Repeat("é", 100), "a.fstool-AAAAAAAAAAAA.tmp"} {
		tmp := tempName(rel)
		if !IsTempFile(path.Base(tmp)) || path.Dir(tmp) != path.Dir(rel) {
			t.Errorf("tempName(%q) = %q", rel, tmp)
		}
	}
}

func FuzzIsTempFile(f *testing.F) {
	f.Add("main.go")
	f.Add(".main.go.fstool-ABCDEFGH2345.tmp")
	f.Add(strings.Repeat("z", 300))
	f.Fuzz(func(t *testing.T, name string) {
		_ = IsTempFile(name) // never panics
		if name == "" || strings.Contains(name, "/") {
			return
		}
		if tmp := tempName(name); !IsTempFile(tmp) {
			t.Fatalf("tempName(%q) = %q is not a temp file", name, tmp)
		}
	})
}

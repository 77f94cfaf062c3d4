package directory

import (
	"errors"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in           string
		worker, name string // empty: an error
	}{
		{"iii://sandbox/fs::read", "sandbox", "fs::read"},
		{"sandbox/fs::read", "sandbox", "fs::read"},
		{"directory/overview", "directory", "overview"},
		{"iii://w-1/f_2", "w-1", "f_2"},
		{"w/a::b::c", "w", "a::b::c"},
		{"w/a/b", "w", "a/b"}, // the name is everything after the first '/'
		{"w/ünï::cödé", "w", "ünï::cödé"},
		{"", "", ""},
		{"iii://", "", ""},
		{"sandbox", "", ""},
		{"iii://sandbox", "", ""},
		{"/fs::read", "", ""},
		{"sandbox/", "", ""},
		{"iii:///fs::read", "", ""},
		{"iii://sandbox/", "", ""},
		{"http://sandbox/fs::read", "", ""},
		{"iii:/sandbox/fs::read", "", ""},
		{"III://sandbox/fs::read", "", ""},
		{"iii://iii://sandbox/fs::read", "", ""},
		{"sand box/fs::read", "", ""},
		{"sand.box/fs::read", "", ""},
		{"sandbox/fs read", "", ""},
		{"sandbox/fs::", "", ""},
		{"sandbox/::read", "", ""},
		{"sandbox/fs::::read", "", ""},
		{"sandbox/fs\n", "", ""},
		{"sandbox/\xff", "", ""},
		{strings.Repeat("w", 200) + "/f", "", ""},
		{"w/" + strings.Repeat("f", 300), "", ""},
	} {
		id, err := ParseID(tc.in)
		if tc.worker == "" {
			if !errors.Is(err, ErrInvalidID) {
				t.Errorf("ParseID(%q) = %+v, %v; want ErrInvalidID", tc.in, id, err)
			}
			continue
		}
		if err != nil || id.Worker != tc.worker || id.Name != tc.name {
			t.Errorf("ParseID(%q) = %+v, %v; want %s/%s", tc.in, id, err, tc.worker, tc.name)
			continue
		}
		if want := tc.worker + "/" + tc.name; id.String() != want || id.Link() != LinkScheme+want {
			t.Errorf("ParseID(%q): String %q, Link %q", tc.in, id.String(), id.Link())
		}
	}
}

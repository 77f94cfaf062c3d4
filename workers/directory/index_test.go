package directory

import (
	"strings"
	"testing"
)

func mustSkill(t testing.TB, id, doc, source string) Skill {
	t.Helper()
	sid, err := ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSkill(sid, doc, source)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBuildIndex(t *testing.T) {
	t.Parallel()
	if idx := buildIndex(nil); idx.Markdown != "" || idx.Workers == nil || len(idx.Workers) != 0 {
		t.Fatalf("empty index: %+v", idx)
	}
	skills := []Skill{
		mustSkill(t, "alpha/a::one", "---\ntitle: One [first]\n---\nDoes one thing. Then more.", SourcePublished),
		mustSkill(t, "alpha/a::two(x)", "", SourceFolder),
		mustSkill(t, "sandbox/fs::read", "Reads a file.", SourcePublished),
		mustSkill(t, "sandbox/overview", "---\ndescription: Runs commands in a box.\n---\n# Sandbox\n\nLong text.\n", SourceFolder),
	}
	idx := buildIndex(skills)
	if len(idx.Workers) != 2 {
		t.Fatalf("workers: %+v", idx.Workers)
	}
	a, s := idx.Workers[0], idx.Workers[1]
	if a.Worker != "alpha" || strings.Join(a.Skills, ",") != "alpha/a::one,alpha/a::two(x)" {
		t.Errorf("alpha: %+v", a)
	}
	wantGenerated := "- [One \\[first\\]](iii://alpha/a::one): Does one thing.\n- [a::two(x)](iii://alpha/a::two\\(x\\))"
	if a.Overview != wantGenerated {
		t.Errorf("alpha overview:\n%s\nwant\n%s", a.Overview, wantGenerated)
	}
	if s.Worker != "sandbox" || s.Overview != "# Sandbox\n\nLong text." || strings.Join(s.Skills, ",") != "sandbox/fs::read" {
		t.Errorf("sandbox: %+v", s)
	}
	want := "# Skills\n\n" + IndexPreamble + "\n" +
		"\n## alpha\n" + wantGenerated + "\n" +
		"\n## sandbox\n" +
		"Runs commands in a box. ([overview](iii://sandbox/overview))\n" +
		"- [fs::read](iii://sandbox/fs::read): Reads a file.\n"
	if idx.Markdown != want {
		t.Errorf("markdown:\n%s\nwant\n%s", idx.Markdown, want)
	}
	// Compact: one line per skill, plus the header, preamble and one
	// heading (and blank line) per worker.
	if lines := strings.Count(idx.Markdown, "\n"); lines != 3+2*2+len(skills) {
		t.Errorf("markdown has %d lines", lines)
	}
	if !strings.Contains(IndexPreamble, GetFunction) {
		t.Errorf("preamble does not name %s", GetFunction)
	}
}

// An index line stays one line, with a bounded description, whatever the
// frontmatter says.
func TestIndexLineBounded(t *testing.T) {
	t.Parallel()
	s := mustSkill(t, "w/f", "---\ntitle: \"a\\nb\"\ndescription: "+strings.Repeat("x", 1000)+"\n---\n", SourcePublished)
	line := skillLine(&s)
	if strings.Contains(line, "\n") || len(line) > 2*MaxDescriptionLen+100 {
		t.Fatalf("line: %q", line)
	}
	if len(s.Description) != 1000 {
		t.Fatalf("an explicit description is served whole: %d", len(s.Description))
	}
}

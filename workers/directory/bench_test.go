package directory

import (
	"fmt"
	"strings"
	"testing"
)

// benchSkills builds n skills over workers workers.
func benchSkills(b *testing.B, n, workers int) []Skill {
	b.Helper()
	out := make([]Skill, 0, n)
	for i := range n {
		id := ID{Worker: fmt.Sprintf("w%03d", i%workers), Name: fmt.Sprintf("fn::op%04d", i)}
		s, err := newSkill(id, "---\ntitle: Operation\ndescription: Does one thing well.\n---\n# Op\n\nBody text. More text.\n", SourcePublished)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func BenchmarkParseDocument(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		doc := "---\ntitle: Read a file\ntype: function\nfunction_id: fs::read\ndescription: Reads.\n---\n" + strings.Repeat("Some markdown text.\n", size/20)
		b.Run(fmt.Sprintf("bytes=%d", len(doc)), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if _, err := ParseDocument(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBuildIndex(b *testing.B) {
	for _, n := range []int{50, 500} {
		skills := benchSkills(b, n, 10)
		b.Run(fmt.Sprintf("skills=%d,workers=10", n), func(b *testing.B) {
			b.ReportAllocs()
			var md int
			for b.Loop() {
				md = len(buildIndex(skills).Markdown)
			}
			b.ReportMetric(float64(md), "markdown-bytes")
		})
	}
}

// BenchmarkGet is a lookup in the current view (what a get call costs
// past the bus).
func BenchmarkGet(b *testing.B) {
	d := &Directory{published: map[string]Skill{}, folder: map[string]Skill{}}
	for _, s := range benchSkills(b, 500, 10) {
		d.published[s.ID] = s
	}
	d.rebuild()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Get("iii://w007/fn::op0257"); err != nil {
			b.Fatal(err)
		}
	}
}

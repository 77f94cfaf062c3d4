package fstool

import (
	"embed"
	"strings"
)

// skillFiles holds one markdown skill document per function, named after
// the function id's last segment ("fs::read" → skills/read.md).
//
//go:embed skills/*.md
var skillFiles embed.FS

// skill returns the skill document of the function id, "" if there is
// none (a test makes sure every function has one).
func skill(id string) string {
	name := id[strings.LastIndex(id, ":")+1:]
	b, err := skillFiles.ReadFile("skills/" + name + ".md")
	if err != nil {
		return ""
	}
	return string(b)
}

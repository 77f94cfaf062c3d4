package fstool

import (
	"regexp"
	"unicode/utf8"
)

// Function ids [Functions] returns.
const (
	ReadFunction  = "fs::read"
	WriteFunction = "fs::write"
	EditFunction  = "fs::edit"
	LsFunction    = "fs::ls"
	GlobFunction  = "fs::glob"
	GrepFunction  = "fs::grep"
)

// MaxPatternBytes bounds the pattern of fs::glob and fs::grep.
const MaxPatternBytes = 4096

// ReadRequest is the payload of fs::read.
type ReadRequest struct {
	// Path is the file, relative to the root or absolute inside it.
	Path string `json:"path"`
	// Offset is the first line to answer, 1-based (0 is 1).
	Offset int `json:"offset,omitempty"`
	// Limit is the number of lines to answer (0 is [DefaultReadLimit]).
	Limit int `json:"limit,omitempty"`
}

// Validate checks the path and the bounds.
func (r ReadRequest) Validate() error {
	if err := checkPath("path", r.Path, true); err != nil {
		return err
	}
	if r.Offset < 0 {
		return invalid("offset %d is negative (lines count from 1)", r.Offset)
	}
	if r.Limit < 0 {
		return invalid("limit %d is negative", r.Limit)
	}
	return nil
}

// ReadResult is the answer of fs::read.
type ReadResult struct {
	// Path is the file's path relative to the root.
	Path string `json:"path"`
	// Content holds the lines like `cat -n`: "%6d\t%s" per line, joined
	// by "\n". Empty for a binary file.
	Content string `json:"content"`
	// LinesRead is the number of lines in Content.
	LinesRead int `json:"lines_read"`
	// TotalLines is the number of lines of the file (a final line without
	// a newline counts).
	TotalLines int `json:"total_lines"`
	// Truncated says Content does not show the file from Offset to its
	// end: the limit or the answer cap stopped it, or a line was cut.
	Truncated bool `json:"truncated"`
	// Binary marks a file with NUL bytes or invalid UTF-8 in its first
	// 8 KiB; it has no content.
	Binary bool `json:"binary,omitempty"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
}

// WriteRequest is the payload of fs::write.
type WriteRequest struct {
	// Path is the file to create or replace; missing parent directories
	// are created.
	Path string `json:"path"`
	// Content is the whole new content.
	Content string `json:"content"`
}

// Validate checks the path.
func (r WriteRequest) Validate() error { return checkPath("path", r.Path, true) }

// WriteResult is the answer of fs::write.
type WriteResult struct {
	Path string `json:"path"`
	// Bytes is the size written.
	Bytes int `json:"bytes"`
	// Created is true when the file did not exist.
	Created bool `json:"created"`
}

// EditRequest is the payload of fs::edit.
type EditRequest struct {
	Path string `json:"path"`
	// OldText is replaced exactly (no pattern, no whitespace folding).
	OldText string `json:"old_text"`
	// NewText replaces it.
	NewText string `json:"new_text"`
	// ReplaceAll replaces every occurrence; without it OldText must occur
	// exactly once.
	ReplaceAll bool `json:"replace_all,omitempty"`
}

// Validate checks the path and that the edit changes something.
func (r EditRequest) Validate() error {
	if err := checkPath("path", r.Path, true); err != nil {
		return err
	}
	if r.OldText == "" {
		return invalid("old_text is required (to write a whole file use fs::write)")
	}
	if r.OldText == r.NewText {
		return invalid("old_text and new_text are equal: the edit would change nothing")
	}
	return nil
}

// EditResult is the answer of fs::edit.
type EditResult struct {
	Path string `json:"path"`
	// Replacements is the number of occurrences replaced.
	Replacements int `json:"replacements"`
}

// LsRequest is the payload of fs::ls.
type LsRequest struct {
	// Path is the directory; empty is the root.
	Path string `json:"path,omitempty"`
}

// Validate checks the path.
func (r LsRequest) Validate() error { return checkPath("path", r.Path, false) }

// Entry types of [Entry].Type.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

// Entry is one directory entry of fs::ls. A symlink is reported, never
// followed: its size is the link's.
type Entry struct {
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	Size int64  `json:"size"`
	// ModTime is the modification time, RFC 3339 in UTC.
	ModTime string `json:"mod_time"`
}

// LsResult is the answer of fs::ls.
type LsResult struct {
	Path string `json:"path"`
	// Entries are sorted by name.
	Entries []Entry `json:"entries"`
	// Truncated says the directory has more entries than the answer.
	Truncated bool `json:"truncated"`
}

// GlobRequest is the payload of fs::glob.
type GlobRequest struct {
	// Pattern is a slash-separated glob: '*', '?' and '[...]' match within
	// one name, "**" as a whole name matches any number of directories,
	// "{a,b}" alternatives. Relative to Path.
	Pattern string `json:"pattern"`
	// Path is the directory the pattern starts from; empty is the root.
	Path string `json:"path,omitempty"`
}

// Validate checks the pattern's syntax and the path.
func (r GlobRequest) Validate() error {
	if err := checkPath("path", r.Path, false); err != nil {
		return err
	}
	if err := checkPattern(r.Pattern); err != nil {
		return err
	}
	_, err := compileGlob(r.Pattern)
	return err
}

func checkPattern(p string) error {
	switch {
	case p == "":
		return invalid("pattern is required")
	case len(p) > MaxPatternBytes:
		return invalid("pattern is %d bytes, more than %d", len(p), MaxPatternBytes)
	case !utf8.ValidString(p):
		return invalid("pattern is not valid UTF-8")
	}
	return nil
}

// GlobResult is the answer of fs::glob.
type GlobResult struct {
	// Matches are the matching files (not directories), relative to the
	// root, sorted.
	Matches []string `json:"matches"`
	// Truncated says there may be more matches than the answer holds.
	Truncated bool `json:"truncated"`
}

// GrepRequest is the payload of fs::grep.
type GrepRequest struct {
	// Pattern is an RE2 regular expression (Go regexp syntax) matched
	// against each line.
	Pattern string `json:"pattern"`
	// Path is a directory to search recursively or one file; empty is the
	// root.
	Path string `json:"path,omitempty"`
	// Glob filters the files: without '/' it matches the file's name
	// ("*.go"), with '/' its path relative to Path ("cmd/**/*.go").
	Glob string `json:"glob,omitempty"`
	// IgnoreCase matches case-insensitively.
	IgnoreCase bool `json:"ignore_case,omitempty"`
	// MaxResults bounds the matches (0 is [DefaultGrepResults]; more than
	// the configured cap is lowered to it).
	MaxResults int `json:"max_results,omitempty"`
}

// Validate checks the expression, the glob and the bounds.
func (r GrepRequest) Validate() error {
	if err := checkPath("path", r.Path, false); err != nil {
		return err
	}
	if err := checkPattern(r.Pattern); err != nil {
		return err
	}
	if _, err := compileRegexp(r.Pattern, r.IgnoreCase); err != nil {
		return err
	}
	if r.Glob != "" {
		if err := checkPath("glob", r.Glob, false); err != nil {
			return err
		}
		if _, err := compileGlob(r.Glob); err != nil {
			return err
		}
	}
	if r.MaxResults < 0 {
		return invalid("max_results %d is negative", r.MaxResults)
	}
	return nil
}

func compileRegexp(p string, ignoreCase bool) (*regexp.Regexp, error) {
	if ignoreCase {
		p = "(?i)" + p
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, invalid("pattern is not an RE2 expression: %v", err)
	}
	return re, nil
}

// GrepMatch is one matching line.
type GrepMatch struct {
	// Path is the file, relative to the root.
	Path string `json:"path"`
	// Line is the line number, 1-based.
	Line int `json:"line"`
	// Text is the line, cut to a bounded length.
	Text string `json:"text"`
}

// GrepResult is the answer of fs::grep.
type GrepResult struct {
	// Matches are in path order, then line order.
	Matches []GrepMatch `json:"matches"`
	// Truncated says there may be more matches than the answer holds:
	// max_results or the answer's byte bound stopped it, the walk
	// reached its bound, or a file was not searched (see Skipped).
	Truncated bool `json:"truncated"`
	// Skipped names text files that were not searched: larger than the
	// file size bound ([WithMaxGrepFileBytes]), growing while read,
	// unreadable, or holding a line too long for the expression's cost
	// bound (a match costs up to its program size per byte). At most
	// [MaxGrepSkipped] are named; SkippedFiles counts them all. Binary
	// files are never searched and never named.
	Skipped []string `json:"skipped,omitempty"`
	// SkippedFiles is the number of files not searched, named or not.
	SkippedFiles int `json:"skipped_files,omitempty"`
}

// MaxGrepSkipped bounds the names in [GrepResult].Skipped.
const MaxGrepSkipped = 20

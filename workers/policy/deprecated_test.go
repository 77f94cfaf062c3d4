package policy

import (
	"go/ast"
	goparser "go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The package uses no name cel-go documents as deprecated (cel.Functions
// was: see celguard.go). Package-level names only: a deprecated method
// would need type information to find.
func TestNoDeprecatedCELNames(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "cel.dev/cel-go").Output()
	if err != nil {
		t.Fatalf("go list cel.dev/cel-go: %v", err)
	}
	root := strings.TrimSpace(string(out))
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	deprecated := map[string]map[string]bool{} // import path -> names
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		imports := map[string]string{} // local name -> path
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			rest, ok := strings.CutPrefix(path, "cel.dev/cel-go/")
			if !ok {
				continue
			}
			local := filepath.Base(path)
			if im.Name != nil {
				local = im.Name.Name
			}
			imports[local] = path
			if deprecated[path] == nil {
				deprecated[path] = deprecatedNames(t, filepath.Join(root, filepath.FromSlash(rest)))
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && imports[x.Name] != "" {
				checked++
				if deprecated[imports[x.Name]][sel.Sel.Name] {
					t.Errorf("%s: %s.%s is deprecated", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 || len(deprecated["cel.dev/cel-go/cel"]) == 0 {
		t.Fatalf("checked %d uses against %d deprecated names of package cel", checked, len(deprecated["cel.dev/cel-go/cel"]))
	}
}

// deprecatedNames lists the package-level names of the Go package in dir
// whose doc comment has a "Deprecated:" paragraph.
func deprecatedNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	isDeprecated := func(doc *ast.CommentGroup) bool {
		return doc != nil && (strings.HasPrefix(doc.Text(), "Deprecated:") || strings.Contains(doc.Text(), "\nDeprecated:"))
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, goparser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && isDeprecated(d.Doc) {
					out[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if isDeprecated(s.Doc) || isDeprecated(d.Doc) && len(d.Specs) == 1 {
							out[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						if isDeprecated(s.Doc) || isDeprecated(d.Doc) && len(d.Specs) == 1 {
							for _, n := range s.Names {
								out[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return out
}

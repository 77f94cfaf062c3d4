package directory_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/directory"
)

// Example: a worker publishes a function's skill at registration, the
// operator adds an overview in the skills folder, and the directory
// serves both.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The sandbox worker registers fs::read with its skill.
	sb, err := e.Worker("sandbox")
	if err != nil {
		panic(err)
	}
	err = sb.Register(engine.Function{
		ID:    "fs::read",
		Skill: "---\ntitle: Read a file\n---\nRead a file of the sandbox. Args: {path}.\n",
		Handler: engine.Typed(func(context.Context, struct{}) (struct{}, error) {
			return struct{}{}, nil
		}),
	})
	if err != nil {
		panic(err)
	}

	// The operator's folder: <dir>/<worker>/<name>.md.
	dir, err := os.MkdirTemp("", "skills-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	_ = os.MkdirAll(filepath.Join(dir, "sandbox"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "sandbox", "overview.md"), []byte("Runs commands and edits files in a box.\n"), 0o644)

	w := directory.NewWorker(directory.WithDir(dir))
	if err := w.Start(ctx, e); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	s, err := engine.Call[directory.Skill](ctx, e, directory.GetFunction, directory.GetRequest{ID: "iii://sandbox/fs::read"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s (%s, %s): %s\n", s.Title, s.FunctionID, s.Source, s.Description)

	idx, err := engine.Call[directory.Index](ctx, e, directory.IndexFunction, directory.IndexRequest{})
	if err != nil {
		panic(err)
	}
	for _, wi := range idx.Workers {
		if wi.Worker == "sandbox" {
			fmt.Println(wi.Overview)
			fmt.Println(wi.Skills)
		}
	}
	// Output:
	// Read a file (fs::read, published): Read a file of the sandbox.
	// Runs commands and edits files in a box.
	// [sandbox/fs::read]
}

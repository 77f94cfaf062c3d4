package fstool_test

import (
	"context"
	"fmt"
	"os"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/sandbox/fstool"
)

// Register the file tools on a worker with a fixed root, write a file,
// edit it and read it back.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	dir, err := os.MkdirTemp("", "fstool-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	w, err := x.Engine.Worker("sandbox")
	if err != nil {
		panic(err)
	}
	fns, err := fstool.Functions(fstool.FixedRoot(dir))
	if err != nil {
		panic(err)
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			panic(err)
		}
	}

	ctx := context.Background()
	e := x.Engine
	if err := e.Trigger(ctx, fstool.WriteFunction, fstool.WriteRequest{Path: "notes/todo.md", Content: "- write\n- test\n"}, nil); err != nil {
		panic(err)
	}
	if err := e.Trigger(ctx, fstool.EditFunction, fstool.EditRequest{Path: "notes/todo.md", OldText: "- test", NewText: "- ship"}, nil); err != nil {
		panic(err)
	}
	r, err := engine.Call[fstool.ReadResult](ctx, e, fstool.ReadFunction, fstool.ReadRequest{Path: "notes/todo.md"})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Content)
	err = e.Trigger(ctx, fstool.ReadFunction, fstool.ReadRequest{Path: "../etc/passwd"}, nil)
	fmt.Println(err)
	// Output:
	//      1	- write
	//      2	- ship
	// forbidden: "../etc/passwd" leaves the working directory
}

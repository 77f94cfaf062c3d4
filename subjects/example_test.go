package subjects_test

import (
	"fmt"

	"github.com/iii-on-nats/iii/subjects"
)

func ExampleFunctionSubject() {
	subj, _ := subjects.FunctionSubject("provider::anthropic::stream")
	fmt.Println(subj)
	odd, _ := subjects.FunctionSubject("fs::read.v2")
	fmt.Println(odd)
	id, _ := subjects.FunctionID(odd)
	fmt.Println(id)
	// Output:
	// iii.fn.provider.anthropic.stream
	// iii.fn.fs.read~2Ev2
	// fs::read.v2
}

func ExampleStateKVKey() {
	k, _ := subjects.StateKVKey("sessions", "s1/meta")
	fmt.Println(k)
	// Output: sessions.s1.meta
}

// Command summary prints what a test run's DRYEXEC_TESTREQ_LOG says: per
// capability (and so per rung), how many tests ran, were skipped, or failed
// because a required capability was missing, then each skipped test and why.
// .ci/run and `make unit` print it at the end of a run.
//
//	go run ./internal/testreq/summary LOG
package main

import (
	"fmt"
	"os"

	"github.com/dryexec/dryexec/internal/testreq"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: summary LOG")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	counts, err := testreq.Summarize(f)
	if err == nil {
		err = testreq.WriteSummary(os.Stdout, counts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

package testreq

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Count is what a log says of one capability: how many tests ran, were
// skipped, or failed for want of it. A test counts once per capability however
// many times it asked.
type Count struct {
	Cap                  Cap
	Ran, Skipped, Failed int
	// SkippedTests names each skipped test with its reason.
	SkippedTests []string
}

// Summarize reads a log LogEnv named and counts it per capability, in All's
// order (then any other capability, by name).
func Summarize(r io.Reader) ([]Count, error) {
	type key struct{ c, pkg, test string }
	seen := map[key]string{}
	reasons := map[key]string{}
	var order []key
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 6 {
			return nil, fmt.Errorf("%w: %q", ErrBadLog, sc.Text())
		}
		k := key{f[0], f[2], f[3]}
		prev, ok := seen[k]
		if !ok {
			order = append(order, k)
		}
		// A test that ran for one ask and skipped on a later one of the same
		// capability (python, then python3 for a subtest) was skipped.
		if rank(f[1]) >= rank(prev) {
			seen[k] = f[1]
			reasons[k] = strings.TrimSpace(f[4] + " " + f[5])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	byCap := map[Cap]*Count{}
	for _, k := range order {
		c := byCap[Cap(k.c)]
		if c == nil {
			c = &Count{Cap: Cap(k.c)}
			byCap[c.Cap] = c
		}
		switch seen[k] {
		case statusRan:
			c.Ran++
		case statusSkipped:
			c.Skipped++
			c.SkippedTests = append(c.SkippedTests, k.pkg+" "+k.test+": "+reasons[k])
		case statusFailed:
			c.Failed++
		}
	}
	var out []Count
	for _, c := range All {
		if n := byCap[c]; n != nil {
			out = append(out, *n)
			delete(byCap, c)
		}
	}
	var rest []Count
	for _, n := range byCap {
		rest = append(rest, *n)
	}
	slices.SortFunc(rest, func(a, b Count) int { return strings.Compare(string(a.Cap), string(b.Cap)) })
	return append(out, rest...), nil
}

// ErrBadLog is a log line that is not one record's.
var ErrBadLog = fmt.Errorf("testreq: not a %s line", LogEnv)

func rank(status string) int {
	switch status {
	case statusRan:
		return 1
	case statusSkipped:
		return 2
	case statusFailed:
		return 3
	}
	return 0
}

// WriteSummary prints counts as a table, then every skipped test.
func WriteSummary(w io.Writer, counts []Count) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "capability\tran\tskipped\tfailed (required, missing)\t")
	for _, c := range counts {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", c.Cap, c.Ran, c.Skipped, c.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range counts {
		for _, s := range c.SkippedTests {
			if _, err := fmt.Fprintf(w, "skipped [%s] %s\n", c.Cap, s); err != nil {
				return err
			}
		}
	}
	return nil
}

package store

import (
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

// BenchmarkSave records a trial without content (a daemon's /bin/true: its
// delta alone), Begin to Save, as the daemon's request path does it: with
// the directory made ahead (spare: KeepSpare, the refill waited for outside
// the timer, as between two trials) and without (own: mkdir, lock, create).
// Both run alternately in one loop; compare their ms medians.
//
//	go test ./store -run '^$' -bench Save -benchtime 400x
func BenchmarkSave(b *testing.B) {
	s, err := Open(b.TempDir(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	d := &dryexec.StateDelta{Rung: "ns", Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: "/"}}
	save := func() time.Duration {
		id := dryexec.NewTrialID()
		d.TrialID = id
		t0 := time.Now()
		tr, err := s.Begin(id)
		if err == nil {
			err = tr.Save(d)
		}
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var own, spare []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		keep := i%2 == 0
		if keep {
			s.KeepSpare()
			s.spares.wg.Wait()
		} else {
			s.DropSpare()
		}
		b.StartTimer()
		if keep {
			spare = append(spare, save())
		} else {
			own = append(own, save())
		}
	}
	s.DropSpare()
	b.ReportMetric(msMedian(own), "ms-own")
	b.ReportMetric(msMedian(spare), "ms-spare")
}

func msMedian(xs []time.Duration) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

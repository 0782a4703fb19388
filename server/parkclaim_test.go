package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// claimerEnv makes the test binary one daemon claiming park claimID in the
// store it names (TestParkClaimRace).
const claimerEnv = "DRYEXEC_TEST_PARK_CLAIMER"

const claimID = "se_rrrrrrrrrrrrrrrrrrrr"

// claimResult is what one claimer daemon reports on its stdout.
type claimResult struct {
	PID      int    `json:"pid"`
	Claimed  string `json:"claimed"`
	Err      string `json:"err"`
	Claimed2 bool   `json:"is_claimed"`  // errors.Is(err, ErrParkClaimed)
	NotFound bool   `json:"is_notfound"` // errors.Is(err, ErrSessionNotFound)
}

// Of N daemons (processes of their own, each a Service over the same store)
// claiming one park at the same moment, exactly one gets it; each other
// gets ErrParkClaimed (an ErrSessionNotFound) naming the winner's pid, and
// the park is whole in the winner's claim, nowhere else. The claimers are
// released together: each says it is ready on a shared pipe and blocks
// reading another, whose write end the test then closes.
func TestParkClaimRace(t *testing.T) {
	if v := os.Getenv(claimerEnv); v != "" {
		claimParkChild(v)
		return
	}
	const n = 8
	store := t.TempDir()
	id := claimID
	testPark(t, store, id, time.Now().Add(time.Hour), func(r *parkRecord) { r.Owner = deadPID(t) })

	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer readyR.Close()
	goR, goW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer goW.Close()
	type child struct {
		cmd *exec.Cmd
		out strings.Builder
	}
	children := make([]*child, n)
	for i := range children {
		c := &child{cmd: exec.Command(os.Args[0], "-test.run", "^TestParkClaimRace$")}
		c.cmd.Env = append(os.Environ(), claimerEnv+"="+store)
		c.cmd.ExtraFiles = []*os.File{readyW, goR} // fds 3 and 4
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	readyW.Close()
	goR.Close()
	// Every claimer has made its Service and waits on the go pipe.
	if _, err := io.ReadFull(readyR, make([]byte, n)); err != nil {
		for _, c := range children {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
		t.Fatalf("claimers ready: %v", err)
	}
	goW.Close()

	var winners []claimResult
	pids := map[int]bool{}
	var losers []claimResult
	for _, c := range children {
		err := c.cmd.Wait()
		out := c.out.String()
		i := strings.LastIndex(out, "claim-result ")
		if err != nil || i < 0 {
			t.Fatalf("claimer: %v\n%s", err, out)
		}
		var r claimResult
		line, _, _ := strings.Cut(out[i+len("claim-result "):], "\n")
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("claimer's result %q: %v", line, err)
		}
		pids[r.PID] = true
		if r.Err == "" {
			winners = append(winners, r)
		} else {
			losers = append(losers, r)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d claimers won the park (want 1): %+v; losers %+v", len(winners), winners, losers)
	}
	w := winners[0]
	for _, l := range losers {
		if !l.Claimed2 || !l.NotFound || !strings.Contains(l.Err, fmt.Sprintf("pid %d", w.PID)) {
			t.Errorf("a loser's error: %+v, want ErrParkClaimed (an ErrSessionNotFound) naming pid %d", l, w.PID)
		}
	}
	if want := filepath.Join(parkedRoot(store), fmt.Sprintf("%s%s-%d", resumingPrefix, id, w.PID)); w.Claimed != want {
		t.Errorf("the winner's claim %q, want %q", w.Claimed, want)
	}
	// The park is whole in the winner's claim, and nowhere else.
	if rec, err := readParkRecord(w.Claimed, id); err != nil || rec.SessionID != id {
		t.Errorf("the claimed park: %+v, %v", rec, err)
	}
	ents, err := os.ReadDir(parkedRoot(store))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != filepath.Base(w.Claimed) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("parked/ holds %q, want only the winner's claim", names)
	}
}

// claimParkChild is one claimer daemon of TestParkClaimRace: it makes its
// Service, says it is ready (fd 3), waits for the go (fd 4 at EOF), claims
// and reports.
func claimParkChild(store string) {
	id := claimID
	ready, gate := os.NewFile(3, "ready"), os.NewFile(4, "go")
	svc, err := NewService(Config{StoreDir: store})
	if err != nil {
		fmt.Println("claimer:", err)
		os.Exit(2)
	}
	defer svc.Close()
	if _, err := ready.Write([]byte{1}); err != nil {
		fmt.Println("claimer:", err)
		os.Exit(2)
	}
	ready.Close()
	io.Copy(io.Discard, gate)
	r := claimResult{PID: os.Getpid()}
	r.Claimed, err = svc.claimPark(id, nil)
	if err != nil {
		r.Err, r.Claimed2, r.NotFound = err.Error(), errors.Is(err, ErrParkClaimed), errors.Is(err, ErrSessionNotFound)
	}
	b, _ := json.Marshal(r)
	fmt.Printf("claim-result %s\n", b)
}

package server_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/dryexec/dryexec/compare"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/wire"
)

// Fork, compare, diff against the origin and keep, over real HTTP on real ns
// sessions; then the discarded branches are gone from the daemon.
func TestSessionForkAPI(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	var info server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, 201, &info)
	sp := "/v1/sessions/" + info.SessionID
	var sr wire.ShellResult
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "echo base > a; echo same > s"}, 200, &sr)
	var fr server.ForkResponse
	d.ok(t, "POST", sp+"/fork", server.ForkRequest{N: 2}, 201, &fr)
	if len(fr.Sessions) != 2 || fr.SessionID != info.SessionID {
		t.Fatalf("fork: %+v", fr)
	}
	b0, b1 := fr.Sessions[0].SessionID, fr.Sessions[1].SessionID
	d.ok(t, "POST", "/v1/sessions/"+b0+"/shell", server.ShellRequest{Command: "echo zero > a; echo x > both"}, 200, &sr)
	d.ok(t, "POST", "/v1/sessions/"+b1+"/shell", server.ShellRequest{Command: "echo one > a; echo x > both; rm s"}, 200, &sr)

	var cmp compare.Result
	d.ok(t, "POST", "/v1/compare", server.CompareRequest{IDs: []string{b0, b1}}, 200, &cmp)
	agree := map[string]string{}
	for _, p := range cmp.Paths {
		agree[p.Path] = p.Agreement
	}
	if want := map[string]string{"a": "differ", "both": "alike", "s": "partial"}; !maps.Equal(agree, want) {
		t.Errorf("compare: %v, want %v", agree, want)
	}
	if len(cmp.Sides) != 2 || cmp.Sides[0].Name != b0 || cmp.Sides[0].Decision != "open" {
		t.Errorf("compare sides: %+v", cmp.Sides)
	}

	var diff server.DiffResponse
	d.ok(t, "POST", "/v1/sessions/"+b1+"/diff", server.DiffRequest{Origin: true}, 200, &diff)
	if string(diff.Writes["a"]) != "one\n" || string(diff.Writes["both"]) != "x\n" || len(diff.Writes) != 2 {
		t.Errorf("origin diff of a branch of a session whose baseline is empty: %+v", diff)
	}
	d.fails(t, "POST", sp+"/diff", server.DiffRequest{Origin: true}, 400, "bad_request")

	var kr server.KeepResponse
	d.ok(t, "POST", sp+"/keep", server.KeepRequest{Branch: b1}, 200, &kr)
	if kr.Kept != b1 || !slices.Equal(kr.Discarded, []string{b0}) {
		t.Errorf("keep: %+v", kr)
	}
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "cat a both; ls"}, 200, &sr)
	if sr.Stdout != "one\nx\na\nboth\n" {
		t.Errorf("after keep: %q", sr.Stdout)
	}
	for _, b := range []string{b0, b1} {
		d.fails(t, "GET", "/v1/sessions/"+b, nil, 404, "not_found")
	}
	d.fails(t, "POST", sp+"/keep", server.KeepRequest{Branch: info.SessionID}, 400, "bad_request")
	d.fails(t, "POST", sp+"/fork", server.ForkRequest{N: 99}, 400, "bad_request")
}

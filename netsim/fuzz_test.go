package netsim

import (
	"context"
	"encoding/hex"
	"io"
	"testing"
)

func fuzzSim(t testing.TB) *Sim {
	s, err := New(context.Background(), Config{CADir: t.TempDir(), Allow: []Rule{{Host: "example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzDNSAnswer: whatever the sandbox sends to port 53, netsim neither
// panics nor answers with something unparsable.
func FuzzDNSAnswer(f *testing.F) {
	q, _ := hex.DecodeString("000701000001000000000000076578616d706c6503636f6d0000010001")
	f.Add(q)
	f.Add([]byte{})
	f.Add(q[:15])
	s := fuzzSim(f)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		reply, _, _, _, _, ok := s.dnsAnswer(pkt)
		if ok && len(reply) < 12 {
			t.Fatalf("short reply %x", reply)
		}
	})
}

// FuzzInbound: arbitrary packets from the sandbox go through the packet
// filter and the netstack without a panic.
func FuzzInbound(f *testing.F) {
	syn, _ := hex.DecodeString("45000028000100004006" + "0000" + "0ac70002" + "c6120001" + "d431005000000001000000005002ffff00000000")
	icmp, _ := hex.DecodeString("4500001c0001000040010000" + "0ac70002" + "cb007109" + "0800f7fe00010001")
	f.Add(syn)
	f.Add(icmp)
	f.Add([]byte{0x60})
	f.Add([]byte{0x45, 0, 0})
	s := fuzzSim(f)
	s.http = s.startHTTP(context.Background())
	st, ep, err := s.newStack(context.Background(), io.Discard)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close(); st.Wait(); s.http.lis.Close(); s.http.srv.Close() })
	f.Fuzz(func(t *testing.T, pkt []byte) {
		s.inbound(ep, pkt)
	})
}

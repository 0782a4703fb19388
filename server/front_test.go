package server

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/front"
)

// TestFrontRequestMatchesServer: every field the front sends is one the
// daemon reads, under the same JSON name with the same type.
func TestFrontRequestMatchesServer(t *testing.T) {
	srv := map[string]reflect.Type{}
	st := reflect.TypeOf(TrialRequest{})
	for i := range st.NumField() {
		srv[strings.Split(st.Field(i).Tag.Get("json"), ",")[0]] = st.Field(i).Type
	}
	ft := reflect.TypeOf(front.TrialRequest{})
	for i := range ft.NumField() {
		f := ft.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if typ, ok := srv[name]; !ok || typ != f.Type {
			t.Errorf("front field %s (json %q, %v): the daemon's is %v (present %v)", f.Name, name, f.Type, typ, ok)
		}
	}
}

// TestParseFrontCall: the small front's records, and what is not one.
func TestParseFrontCall(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       frontCall
		bad        bool
	}{
		{"all", "arun\x00a--\x00a/bin/echo\x00a\x00eA=1\x00eB=x=y\x00c/home/u\x00toe\x00",
			frontCall{args: []string{"run", "--", "/bin/echo", ""}, environ: []string{"A=1", "B=x=y"}, cwd: "/home/u",
				tty: front.Terminals{Stdout: true, Stderr: true}}, false},
		{"no terminals, no cwd", "arun\x00t\x00", frontCall{args: []string{"run"}}, false},
		{"empty", "", frontCall{}, false},
		{"no NUL at the end", "arun", frontCall{}, true},
		{"a record without its tag", "arun\x00\x00", frontCall{}, true},
		{"an unknown tag", "zx\x00", frontCall{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFrontCall([]byte(tc.body))
			if (err != nil) != tc.bad {
				t.Fatalf("err %v, want bad %v", err, tc.bad)
			}
			if !tc.bad && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if g := getenv([]string{"A=1", "A=2", "B", "C="})("A"); g != "1" {
		t.Errorf("getenv: the first entry of a name is its value (as os.Getenv), got %q", g)
	}
}

// TestFrontNeedsUpgrade: POST /v1/front without its Upgrade header is
// refused (426) before anything is read or run.
func TestFrontNeedsUpgrade(t *testing.T) {
	h := Handler(&Service{}, HandlerOptions{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/front", strings.NewReader("arun\x00")))
	if rec.Code != http.StatusUpgradeRequired || !strings.Contains(rec.Body.String(), "upgrade_required") {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
}

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

// TestFrontRequestCopied: the front's request copied field by field gives
// what its JSON gives, with every field set (a field added to
// front.TrialRequest and not to the copy fails here).
func TestFrontRequestCopied(t *testing.T) {
	var req front.TrialRequest
	v := reflect.ValueOf(&req).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(7 + i))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"a", v.Type().Field(i).Name}))
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"K": v.Type().Field(i).Name}))
		default:
			t.Fatalf("front.TrialRequest.%s: a %v, which this test cannot fill", v.Type().Field(i).Name, f.Kind())
		}
	}
	copied, err := trialRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	viaJSON, err := trialRequest(&req) // not the front's type: through JSON
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(copied, viaJSON) {
		t.Fatalf("copied %+v\nJSON   %+v", copied, viaJSON)
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

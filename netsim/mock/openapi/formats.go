package openapi

import (
	"encoding/json"
	"fmt"
	"net/mail"
	"net/url"
	"regexp"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/dryexec/dryexec/netsim/mock"
)

// kin-openapi checks only some string formats unless formats are registered
// in its package-level registry, which would change every other user of the
// library in the process. netsim checks the common remaining ones itself.

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func checkFormat(format, v string) error {
	switch format {
	case "uuid":
		if !uuidRE.MatchString(v) {
			return fmt.Errorf("%q is not a uuid", v)
		}
	case "email":
		if a, err := mail.ParseAddress(v); err != nil || a.Address != v {
			return fmt.Errorf("%q is not an email address", v)
		}
	case "uri", "url":
		if u, err := url.Parse(v); err != nil || u.Scheme == "" {
			return fmt.Errorf("%q is not an absolute URI", v)
		}
	}
	return nil
}

// checkFormats walks v (decoded JSON) along s and checks string formats.
func checkFormats(s *openapi3.Schema, v any, at string, depth int) error {
	if s == nil || depth > 32 {
		return nil
	}
	for _, r := range s.AllOf {
		if err := checkFormats(r.Value, v, at, depth+1); err != nil {
			return err
		}
	}
	switch x := v.(type) {
	case string:
		if err := checkFormat(s.Format, x); err != nil {
			return fmt.Errorf("%s: %v", at, err)
		}
	case map[string]any:
		for name, ref := range s.Properties {
			if pv, ok := x[name]; ok && ref != nil {
				if err := checkFormats(ref.Value, pv, at+"."+name, depth+1); err != nil {
					return err
				}
			}
		}
	case []any:
		if s.Items != nil {
			for i, item := range x {
				if err := checkFormats(s.Items.Value, item, fmt.Sprintf("%s[%d]", at, i), depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkRequestFormats checks the formats of an operation's parameters and
// JSON body (after kin-openapi's validation passed).
func checkRequestFormats(o op, req *mock.Request, params map[string]string) error {
	q, _ := url.ParseQuery(req.RawQuery)
	all := append(openapi3.Parameters{}, o.item.Parameters...)
	all = append(all, o.op.Parameters...)
	for _, ref := range all {
		p := ref.Value
		if p == nil || p.Schema == nil || p.Schema.Value == nil {
			continue
		}
		var val string
		var ok bool
		switch p.In {
		case "path":
			val, ok = params[p.Name]
		case "query":
			ok = q.Has(p.Name)
			val = q.Get(p.Name)
		case "header":
			val = req.Header.Get(p.Name)
			ok = val != ""
		}
		if ok {
			if err := checkFormat(p.Schema.Value.Format, val); err != nil {
				return fmt.Errorf("%s parameter %s: %v", p.In, p.Name, err)
			}
		}
	}
	if rb := o.op.RequestBody; rb != nil && rb.Value != nil && len(req.Body) > 0 {
		mt := rb.Value.Content.Get("application/json")
		ct := req.Header.Get("Content-Type")
		if mt != nil && mt.Schema != nil && (ct == "" || strings.Contains(ct, "json")) {
			var v any
			if json.Unmarshal(req.Body, &v) == nil {
				return checkFormats(mt.Schema.Value, v, "body", 0)
			}
		}
	}
	return nil
}

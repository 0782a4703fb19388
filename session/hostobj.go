package session

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dryexec/dryexec/wire"
)

// hostObject is one registered object with the methods its allowlist opens.
// Built once at Open and read-only after.
type hostObject struct {
	name    string
	methods map[string]*hostMethod // by Go method name
	// dispatch, when not nil, is a Dispatcher whose allowed method names
	// (exactly as listed) are the keys of allowed.
	dispatch Dispatcher
	allowed  map[string]bool
}

// Dispatcher is a host object whose methods are not Go methods: its calls are
// forwarded elsewhere (the daemon forwards them to the Python SDK process that
// owns the real object). The session still decides every call: only the names
// listed in Options.Allow (matched exactly, never starting with "_") reach
// CallMethod. A *wire.RemoteError it returns reaches Python with its code
// (permission, type, host_error); any other error is a host_error.
type Dispatcher interface {
	CallMethod(ctx context.Context, method string, args []wire.Value) (wire.Value, error)
}

// KwDispatcher is a Dispatcher that also takes keyword arguments. A call with
// keyword arguments to a Dispatcher that is not one is a TypeError in Python.
// The names reaching it are identifiers that do not start with "_".
type KwDispatcher interface {
	Dispatcher
	CallMethodKw(ctx context.Context, method string, args []wire.Value, kwargs map[string]wire.Value) (wire.Value, error)
}

// hostMethod is one allowlisted method, its signature checked at Open.
type hostMethod struct {
	fn       reflect.Value // bound to the object
	ctx      bool          // the first parameter is a context.Context
	in       []reflect.Type
	variadic bool
	errLast  bool // the last result is an error
	value    bool // there is a non-error result
}

var (
	ctxType = reflect.TypeFor[context.Context]()
	errType = reflect.TypeFor[error]()
)

// goMethodName maps a name as Python calls it (or as an allowlist lists it) to
// the Go method: the first letter upper-cased, so `db.query` calls Query.
func goMethodName(n string) string {
	r, size := utf8.DecodeRuneInString(n)
	if r == utf8.RuneError {
		return n
	}
	return string(unicode.ToUpper(r)) + n[size:]
}

// newHostObjects checks the registrations and allowlists. It fails closed: an
// object without an allowlist, an allowlist without an object, a wildcard, or
// an allowlisted method that does not exist or cannot be called through the
// codec is an error.
func newHostObjects(objs map[string]any, allow map[string][]string) (map[string]*hostObject, error) {
	out := map[string]*hostObject{}
	for name := range allow {
		if _, ok := objs[name]; !ok {
			return nil, fmt.Errorf("session: Allow names %q, which is not a registered host object", name)
		}
	}
	for name, obj := range objs {
		if name == "" {
			return nil, fmt.Errorf("session: a host object with an empty name")
		}
		if obj == nil {
			return nil, fmt.Errorf("session: host object %q is nil", name)
		}
		methods, ok := allow[name]
		if !ok {
			return nil, fmt.Errorf("session: host object %q has no Allow entry: every host object needs an explicit allowlist", name)
		}
		ho := &hostObject{name: name, methods: map[string]*hostMethod{}}
		if d, ok := obj.(Dispatcher); ok {
			ho.dispatch, ho.allowed = d, map[string]bool{}
			for _, m := range methods {
				switch {
				case strings.Contains(m, "*"):
					return nil, fmt.Errorf("session: host object %q: wildcard %q in Allow: list each method", name, m)
				case m == "":
					return nil, fmt.Errorf("session: host object %q: an empty method name in Allow", name)
				case !strings.HasPrefix(m, "_"):
					ho.allowed[m] = true
				}
			}
			out[name] = ho
			continue
		}
		v := reflect.ValueOf(obj)
		for _, m := range methods {
			switch {
			case strings.Contains(m, "*"):
				return nil, fmt.Errorf("session: host object %q: wildcard %q in Allow: list each method", name, m)
			case m == "":
				return nil, fmt.Errorf("session: host object %q: an empty method name in Allow", name)
			case strings.HasPrefix(m, "_"):
				continue // private: listed or not, never callable
			}
			gn := goMethodName(m)
			mv := v.MethodByName(gn)
			if !mv.IsValid() {
				return nil, fmt.Errorf("session: host object %q (%T) has no exported method %s (allowed as %q); methods of a pointer receiver need a pointer registered", name, obj, gn, m)
			}
			hm, err := checkMethod(mv)
			if err != nil {
				return nil, fmt.Errorf("session: host object %q method %s: %w", name, gn, err)
			}
			ho.methods[gn] = hm
		}
		out[name] = ho
	}
	return out, nil
}

// checkMethod accepts parameters and results the codec can carry: an optional
// leading context.Context, JSON-representable values or []byte, and an optional
// trailing error result.
func checkMethod(mv reflect.Value) (*hostMethod, error) {
	t := mv.Type()
	hm := &hostMethod{fn: mv, variadic: t.IsVariadic()}
	for i := range t.NumIn() {
		p := t.In(i)
		if i == 0 && p == ctxType {
			hm.ctx = true
			continue
		}
		check := p
		if hm.variadic && i == t.NumIn()-1 {
			check = p.Elem()
		}
		if !representable(check, map[reflect.Type]bool{}) {
			return nil, fmt.Errorf("parameter %d (%v) cannot be carried by the json/bytes/file codec", i+1, p)
		}
		hm.in = append(hm.in, p)
	}
	switch n := t.NumOut(); {
	case n == 0:
	case n == 1 && t.Out(0) == errType:
		hm.errLast = true
	case n == 1:
		hm.value = true
	case n == 2 && t.Out(1) == errType:
		hm.value, hm.errLast = true, true
	default:
		return nil, fmt.Errorf("results %v: want (), (T), (error) or (T, error)", t)
	}
	if hm.value && !representable(t.Out(0), map[reflect.Type]bool{}) {
		return nil, fmt.Errorf("result %v cannot be carried by the json/bytes/file codec", t.Out(0))
	}
	return hm, nil
}

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
)

// representable reports whether values of t survive JSON both ways.
func representable(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return true
	}
	seen[t] = true
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) && (t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler)) {
		return true
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Slice, reflect.Array, reflect.Pointer:
		return representable(t.Elem(), seen)
	case reflect.Map:
		switch t.Key().Kind() {
		case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			if !t.Key().Implements(textMarshaler) {
				return false
			}
		}
		return representable(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				continue
			}
			if !representable(f.Type, seen) {
				return false
			}
		}
		return true
	case reflect.Interface:
		return t.NumMethod() == 0
	}
	return false
}

func isBytes(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8
}

// call runs one allowlisted method. Refusals are RemoteErrors with the code the
// Python side turns into its exception (permission → PermissionError, type →
// TypeError, host_error → RuntimeError).
func (ho *hostObject) call(ctx context.Context, method string, args []wire.Value, kwargs map[string]wire.Value) (val wire.Value, err error) {
	if ho.dispatch != nil {
		if !ho.allowed[method] {
			return val, remoteErr("permission", "host object %q: method %q is not allowed", ho.name, method)
		}
		var v wire.Value
		if len(kwargs) == 0 {
			v, err = ho.dispatch.CallMethod(ctx, method, args)
		} else if kd, ok := ho.dispatch.(KwDispatcher); ok {
			v, err = kd.CallMethodKw(ctx, method, args, kwargs)
		} else {
			return val, remoteErr("type", "%s.%s() takes no keyword arguments", ho.name, method)
		}
		var re *wire.RemoteError
		switch {
		case errors.As(err, &re):
			return val, re
		case err != nil:
			return val, remoteErr("host_error", "%s.%s(): %v", ho.name, method, err)
		}
		if err := wire.CheckValue(&v); err != nil {
			return val, remoteErr("host_error", "%s.%s() result: %v", ho.name, method, err)
		}
		return v, nil
	}
	hm := ho.methods[goMethodName(method)]
	if hm == nil {
		return val, remoteErr("permission", "host object %q: method %q is not allowed", ho.name, method)
	}
	if len(kwargs) > 0 {
		kw, err := kwargsParam(hm, len(args), kwargs)
		if err != nil {
			return val, remoteErr("type", "%s.%s(): %v", ho.name, method, err)
		}
		args = append(slices.Clone(args), kw)
	}
	n := len(hm.in)
	if (!hm.variadic && len(args) != n) || (hm.variadic && len(args) < n-1) {
		return val, remoteErr("type", "%s.%s() takes %d arguments (%d given)", ho.name, method, n, len(args))
	}
	in := make([]reflect.Value, 0, len(args)+1)
	if hm.ctx {
		in = append(in, reflect.ValueOf(ctx))
	}
	for i, a := range args {
		t := hm.in[min(i, n-1)]
		if hm.variadic && i >= n-1 {
			t = t.Elem()
		}
		v, err := fromValue(a, t)
		if err != nil {
			return val, remoteErr("type", "%s.%s() argument %d: %v", ho.name, method, i+1, err)
		}
		in = append(in, v)
	}
	defer func() {
		if r := recover(); r != nil {
			err = remoteErr("host_error", "%s.%s() panicked: %v", ho.name, method, r)
		}
	}()
	out := hm.fn.Call(in)
	if hm.errLast {
		if e, _ := out[len(out)-1].Interface().(error); e != nil {
			return val, remoteErr("host_error", "%s.%s(): %v", ho.name, method, e)
		}
	}
	if !hm.value {
		return wire.Value{Type: "json"}, nil
	}
	return toValue(out[0])
}

// fromValue converts one argument: bytes to []byte (or any), a file's path to
// a string (or any), json to whatever the parameter's type decodes from.
func fromValue(a wire.Value, t reflect.Type) (reflect.Value, error) {
	anyType := t.Kind() == reflect.Interface && t.NumMethod() == 0
	switch a.Type {
	case "bytes":
		b := a.Bytes
		if b == nil {
			b = []byte{}
		}
		switch {
		case isBytes(t):
			return reflect.ValueOf(b).Convert(t), nil
		case anyType:
			return reflect.ValueOf(b), nil
		}
		return reflect.Value{}, fmt.Errorf("bytes given where %v is expected", t)
	case "file":
		switch {
		case t.Kind() == reflect.String:
			return reflect.ValueOf(a.Path).Convert(t), nil
		case anyType:
			return reflect.ValueOf(a.Path), nil
		}
		return reflect.Value{}, fmt.Errorf("a path given where %v is expected", t)
	case "json":
		if isBytes(t) {
			return reflect.Value{}, fmt.Errorf("a json value given where bytes are expected")
		}
		b, err := json.Marshal(a.JSON)
		if err != nil {
			return reflect.Value{}, err
		}
		p := reflect.New(t)
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(p.Interface()); err != nil {
			return reflect.Value{}, err
		}
		return p.Elem(), nil
	}
	return reflect.Value{}, fmt.Errorf("unknown value type %q", a.Type)
}

// toValue converts a result: []byte as bytes, anything else as JSON.
func toValue(v reflect.Value) (wire.Value, error) {
	if isBytes(v.Type()) {
		b := v.Bytes()
		if b == nil {
			b = []byte{}
		}
		return wire.Value{Type: "bytes", Bytes: b}, nil
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return wire.Value{}, remoteErr("host_error", "encoding the result: %v", err)
	}
	return wire.Value{Type: "json", JSON: json.RawMessage(b)}, nil
}

// kwargsParam folds keyword arguments into the method's last parameter: Go
// methods have no parameter names, so keyword arguments are accepted by a
// method whose last parameter is a struct (or pointer to one) or a map with
// string keys, and whose other parameters the positional arguments fill. They
// become one JSON object decoded into it, unknown fields refused: a keyword
// the struct does not have is a TypeError, as in Python.
func kwargsParam(hm *hostMethod, positional int, kwargs map[string]wire.Value) (wire.Value, error) {
	n := len(hm.in)
	if hm.variadic || n == 0 || positional != n-1 {
		return wire.Value{}, fmt.Errorf("keyword arguments fill the last parameter, after %d positional ones (%d given)", max(n-1, 0), positional)
	}
	t := hm.in[n-1]
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct && (t.Kind() != reflect.Map || t.Key().Kind() != reflect.String) {
		return wire.Value{}, fmt.Errorf("takes no keyword arguments (its last parameter is %v, not a struct or map)", hm.in[n-1])
	}
	obj := make(map[string]any, len(kwargs))
	for k, v := range kwargs {
		switch v.Type {
		case "json":
			obj[k] = v.JSON
		case "bytes":
			obj[k] = v.Bytes // base64, as encoding/json decodes []byte
		case "file":
			obj[k] = v.Path
		default:
			return wire.Value{}, fmt.Errorf("keyword %q: unknown value type %q", k, v.Type)
		}
	}
	return wire.Value{Type: "json", JSON: obj}, nil
}

// checkKwargs refuses keyword names that are not identifiers or are private
// (a dunder included) and values the codec does not carry. It runs before
// anything looks at the object, so that no keyword reaches a method unchecked.
func checkKwargs(object, method string, kwargs map[string]wire.Value) error {
	for k, v := range kwargs {
		if !validKwarg(k) {
			return remoteErr("type", "%s.%s(): keyword %q is not a Python identifier", object, method, k)
		}
		if strings.HasPrefix(k, "_") {
			return remoteErr("permission", "%s.%s(): keyword %q is private", object, method, k)
		}
		if err := wire.CheckValue(&v); err != nil {
			return remoteErr("type", "%s.%s(): keyword %q: %v", object, method, k, err)
		}
	}
	return nil
}

// validKwarg: a Python identifier in ASCII (letters, digits, "_", not first
// a digit), at most 256 bytes.
func validKwarg(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i, r := range k {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// serveHostCall answers the guest's hostcall: every refusal is decided here,
// on the host, whatever the sandbox claims.
func (s *Session) serveHostCall(f *wire.Frame) (any, [][]byte, error) {
	var hc wire.HostCall
	if err := wire.DecodeBody(f, &hc, true); err != nil {
		return nil, nil, err
	}
	for i := range hc.Args {
		if err := wire.CheckValue(&hc.Args[i]); err != nil {
			return nil, nil, remoteErr("type", "argument %d: %v", i+1, err)
		}
	}
	if err := checkKwargs(hc.Object, hc.Method, hc.Kwargs); err != nil {
		return nil, nil, err
	}
	ho := s.hostObject(hc.Object)
	switch {
	case ho == nil:
		return nil, nil, remoteErr("permission", "there is no host object %q", hc.Object)
	case hc.Method == "" || strings.HasPrefix(hc.Method, "_"):
		return nil, nil, remoteErr("permission", "host object %q: method %q is private", hc.Object, hc.Method)
	}
	v, err := ho.call(s.hostCtx, hc.Method, hc.Args, hc.Kwargs)
	if err != nil {
		return nil, nil, err
	}
	return wire.EncodeBody(&wire.HostCallResult{Value: v})
}

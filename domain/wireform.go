package domain

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"time"
)

// wireForm brings the event e points to, in place, to the form it has once
// encoded and decoded again (json.Marshal, then DecodeEvent): raw JSON
// compacted with HTML characters escaped as json.Marshal writes it, a nil raw
// JSON field that is not omitted as null, and an empty list or map that is
// omitted as nil. Its encoding does not change. The overlay applies events in
// this form, so that the state a command is decided into is the state the
// log replays to, byte for byte: the views are written from it directly.
func wireForm(e Event) {
	v := reflect.ValueOf(e)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return
	}
	v = v.Elem()
	if !needsWireForm(v.Type()) {
		return
	}
	normalize(v, false)
}

var (
	rawType  = reflect.TypeFor[json.RawMessage]()
	timeType = reflect.TypeFor[time.Time]()
	// wireTypes caches, per type, whether a value of it can differ from
	// its wire form.
	wireTypes sync.Map // reflect.Type -> bool
)

// needsWireForm reports whether a value of type t can hold raw JSON, a
// list or a map.
func needsWireForm(t reflect.Type) bool {
	if v, ok := wireTypes.Load(t); ok {
		return v.(bool)
	}
	wireTypes.Store(t, false) // a recursive type is decided by its other fields
	need := false
	switch t.Kind() {
	case reflect.Slice, reflect.Map:
		need = true
	case reflect.Pointer, reflect.Array:
		need = needsWireForm(t.Elem())
	case reflect.Struct:
		if t == timeType {
			break
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && needsWireForm(f.Type) {
				need = true
				break
			}
		}
	}
	wireTypes.Store(t, need)
	return need
}

// inWireForm reports whether raw JSON b is already as json.Compact and
// json.HTMLEscape would leave it: no white space outside strings, and no
// '<', '>', '&', U+2028 or U+2029 anywhere. One pass over the bytes, several
// times cheaper than compacting and escaping a copy of a large input to
// compare (a quarter of the service's CPU under 250 KiB inputs). What it
// passes that is not valid JSON is left as it is, as Compact's error
// leaves it.
func inWireForm(b []byte) bool {
	in := false // within a string
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case in && c == '\\':
			i++ // the escaped byte, whatever it is
		case c == '"':
			in = !in
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9):
			return false // U+2028, U+2029
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

// normalize brings v, settable, to its wire form; omitEmpty says whether
// its field omits an empty value.
func normalize(v reflect.Value, omitEmpty bool) {
	t := v.Type()
	if t == rawType {
		switch {
		case v.IsNil() && !omitEmpty:
			v.SetBytes([]byte("null"))
		case v.IsNil():
		case v.Len() == 0:
			v.SetBytes(nil) // an empty one does not encode
		case inWireForm(v.Bytes()):
		default:
			var b bytes.Buffer
			if json.Compact(&b, v.Bytes()) != nil {
				return // it does not encode: the writer refuses the event
			}
			var esc bytes.Buffer
			json.HTMLEscape(&esc, b.Bytes())
			if !bytes.Equal(esc.Bytes(), v.Bytes()) {
				v.SetBytes(esc.Bytes())
			}
		}
		return
	}
	if !needsWireForm(t) {
		return
	}
	switch t.Kind() {
	case reflect.Slice:
		if v.Len() == 0 {
			if omitEmpty && !v.IsNil() {
				v.SetZero()
			}
			return
		}
		for i := range v.Len() {
			normalize(v.Index(i), false)
		}
	case reflect.Map:
		if v.Len() == 0 {
			if omitEmpty && !v.IsNil() {
				v.SetZero()
			}
			return
		}
		if t.Elem().Kind() == reflect.String || !needsWireForm(t.Elem()) {
			return
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(t.Elem()).Elem()
			e.Set(v.MapIndex(k))
			normalize(e, false)
			v.SetMapIndex(k, e)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			normalize(v.Elem(), false)
		}
	case reflect.Array:
		for i := range v.Len() {
			normalize(v.Index(i), false)
		}
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			_, opts, _ := strings.Cut(tag, ",")
			normalize(v.Field(i), hasOption(opts, "omitempty"))
		}
	}
}

func hasOption(opts, name string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == name {
			return true
		}
	}
	return false
}

package api

import (
	"strings"
	"testing"
)

func TestDecodeTreatsNullAndEmptyAsAbsent(t *testing.T) {
	for _, body := range []string{``, `  `, `null`, `{}`, `{"a": null}`} {
		f, fe := Decode([]byte(body))
		if fe != nil {
			t.Fatalf("Decode(%q): %v", body, fe)
		}
		if f.Has("a") || f.OptStr("a") != nil || f.Str("a", false) != "" || f.Err() != nil {
			t.Fatalf("Decode(%q): field a seen as present", body)
		}
		f.Str("a", true)
		if fe := f.Err(); fe == nil || fe.Type != "missing" || fe.Field != "a" {
			t.Fatalf("Decode(%q): required a gave %v", body, fe)
		}
	}
	for body, typ := range map[string]string{`[1]`: "model_attributes_type", `{"a":`: "json_invalid", `"x"`: "model_attributes_type"} {
		if _, fe := Decode([]byte(body)); fe == nil || fe.Type != typ {
			t.Fatalf("Decode(%q) = %v, want %s", body, fe, typ)
		}
	}
}

func TestFieldTypes(t *testing.T) {
	f, _ := Decode([]byte(`{"s":"x","n":3,"fl":2.5,"ns":"4","b":"yes","l":["a"],"il":[1,2],"m":{"k":"v","z":null}}`))
	if f.Str("s", true) != "x" || !f.Bool("b", false) {
		t.Fatal("string or bool")
	}
	if n, ok := f.Int("n"); !ok || n != 3 {
		t.Fatal("int")
	}
	if v, ok := f.Float("ns"); !ok || v != 4 {
		t.Fatal("numeric string")
	}
	if l := f.StrList("l"); len(l) != 1 || l[0] != "a" {
		t.Fatal("string list")
	}
	if il := f.IntList("il"); len(il) != 2 {
		t.Fatal("int list")
	}
	if m := f.StrMap("m"); m["k"] != "v" || m["z"] != "" {
		t.Fatal("string map")
	}
	if f.Err() != nil {
		t.Fatal(f.Err())
	}
	f.Int("fl")
	if fe := f.Err(); fe == nil || fe.Type != "int_from_float" || !strings.Contains(fe.Error(), "'fl'") {
		t.Fatalf("1.5 for an int: %v", fe)
	}
	g, _ := Decode([]byte(`{"s":5,"b":"maybe"}`))
	g.Str("s", true)
	g.Bool("b", false)
	if fe := g.Err(); fe == nil || fe.Field != "s" || fe.Type != "string_type" || !strings.Contains(fe.Msg, "a number") {
		t.Fatalf("first error should name s: %v", fe)
	}
}

func TestStrictFieldsAndUnknown(t *testing.T) {
	body := []byte(`{"n":"5","b":"yes","ok":true,"x":1,"sesion_id":"s","known":2}`)
	lax, _ := Decode(body)
	if v, ok := lax.Float("n"); !ok || v != 5 || !lax.Bool("b", false) || lax.Err() != nil {
		t.Fatalf("lax fields refused a numeric string or \"yes\": %v", lax.Err())
	}
	f, _ := DecodeStrict(body)
	if _, ok := f.Float("n"); ok || f.Err() == nil || f.Err().Field != "n" || !strings.Contains(f.Err().Msg, "got a string") {
		t.Fatalf("strict number from a string: %v", f.Err())
	}
	f, _ = DecodeStrict(body)
	if f.Bool("b", false); f.Err() == nil || f.Err().Field != "b" {
		t.Fatalf("strict bool from \"yes\": %v", f.Err())
	}
	f, _ = DecodeStrict(body)
	f.Bool("ok", false)
	f.Int("x")
	f.Known("known")
	if got := strings.Join(f.Unknown(), ","); got != "b,n,sesion_id" || f.Err() != nil {
		t.Fatalf("unknown fields %q (err %v)", got, f.Err())
	}
}

// A number too large for a float64 is out of range, not "not a number";
// one too small to hold is 0.
func TestFloatOutOfRange(t *testing.T) {
	for _, body := range []string{`{"t":1e309}`, `{"t":-1e309}`, `{"t":"1e309"}`} {
		for _, strict := range []bool{false, true} {
			dec := Decode
			if strict {
				dec = DecodeStrict
			}
			f, fe := dec([]byte(body))
			if fe != nil {
				t.Fatalf("%s: %v", body, fe)
			}
			f.Float("t")
			fe = f.Err()
			if strict && body == `{"t":"1e309"}` {
				if fe == nil || fe.Type != "float_type" {
					t.Errorf("strict %s: %v, want float_type", body, fe)
				}
				continue
			}
			if fe == nil || fe.Field != "t" || !strings.Contains(fe.Msg, "out of range") || strings.Contains(fe.Msg, "got a number") {
				t.Errorf("%s (strict %v): %v", body, strict, fe)
			}
		}
	}
	f, _ := DecodeStrict([]byte(`{"t":1e-400}`))
	if v, ok := f.Float("t"); f.Err() != nil || !ok || v != 0 {
		t.Errorf("1e-400: %v %v %v", v, ok, f.Err())
	}
}

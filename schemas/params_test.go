package schemas_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// A parameters schema is compiled on its own: what breaks its metaschema
// is named by its pointer, and it may refer to nothing outside itself.
func TestCompileParamsRefusals(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type": "object", "properties": {"customer": {"type": "strange"}}}`: "/properties/customer/type",
		`{"properties": {"a": {"pattern": "(?=x)"}}}`:                         "/properties/a/pattern",
		`{"$ref": "https://example.com/x.json"}`:                              "",
		`{"$ref": "../common.json#/$defs/Name"}`:                              "",
		`[1]`:                                                                 "",
		`{"properties": [1]}`:                                                 "/properties",
	} {
		_, err := schemas.CompileParams([]byte(schema))
		var we *schemas.Error
		require.ErrorAs(t, err, &we, schema)
		require.Equal(t, schemas.CodeInvalid, we.Code, schema)
		if want == "" {
			require.Empty(t, we.Fields, schema)
			continue
		}
		require.Equal(t, want, we.Fields[0].Pointer, schema)
	}
}

func TestParamsValidateAppliesDefaultsAndNamesTheParam(t *testing.T) {
	p, err := schemas.CompileParams([]byte(`{"type": "object", "additionalProperties": false, "required": ["a"],
		"properties": {"a": {"type": "integer", "minimum": 2}, "b": {"type": "string", "default": "x"}}}`))
	require.NoError(t, err)
	require.True(t, p.Declares("a"))
	require.False(t, p.Declares("c"))
	require.Equal(t, []string{"a", "b"}, p.Names())
	out, err := p.Validate([]byte(`{"a": 3}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"a": 3, "b": "x"}`, string(out))
	out, err = p.Validate([]byte(`{"a": 12345678901234567890}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"a": 12345678901234567890, "b": "x"}`, string(out), "numbers kept as written")
	for params, field := range map[string]string{
		`{"a": 1}`:         "/a",
		`{"b": "y"}`:       "/a",
		`{"a": "x"}`:       "/a",
		`{"a": 3, "a": 4}`: "/a",
		`{"a": 3, "c": 1}`: "/c",
	} {
		_, err := p.Validate([]byte(params))
		var we *schemas.Error
		require.ErrorAs(t, err, &we, params)
		require.Equal(t, field, we.Fields[0].Pointer, params)
	}
	_, err = p.Validate([]byte(`[1]`))
	require.ErrorIs(t, err, schemas.ErrInvalid)
}

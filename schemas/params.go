package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ParamsSchema is a ritual's parameters schema (RitualTemplate.Parameters),
// compiled: it checks the params of a run (Validate) and says which
// parameters it declares (Declares).
type ParamsSchema struct {
	compiled *jsonschema.Schema
	r        *registry
	// defaults holds the default of each declared property that has one.
	defaults map[string]any
	names    []string
}

// paramsFile is the address (under baseURL) a parameters schema is
// compiled under; it refers to nothing outside itself.
const paramsFile = "rituals/parameters.json"

// CompileParams compiles schema, a JSON Schema (draft 2020-12 unless its
// $schema names another draft) for the params object of a ritual's runs.
// It returns an *Error with CodeInvalid when schema is not a JSON object,
// does not compile, refers to a schema outside itself, or has properties
// that are not an object; when the schema breaks its metaschema, Fields
// name each offending keyword by its JSON pointer within schema
// (/properties/region/type).
func CompileParams(schema json.RawMessage) (_ *ParamsSchema, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Code: CodeInvalid, Message: fmt.Sprintf("the parameters' schema does not compile: %v", p)}
		}
	}()
	_ = growStack(0)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, &Error{Code: CodeInvalid, Message: "the parameters' schema is not JSON: " + err.Error()}
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, &Error{Code: CodeInvalid, Message: "the parameters' schema must be a JSON object (a JSON Schema with properties, one for each parameter)"}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(paramsLoader{})
	c.UseRegexpEngine(compilePattern)
	r := &registry{docs: map[string]any{paramsFile: doc}}
	if err := c.AddResource(baseURL+paramsFile, doc); err != nil {
		return nil, &Error{Code: CodeInvalid, Message: "the parameters' schema does not compile: " + err.Error()}
	}
	s, err := c.Compile(baseURL + paramsFile)
	if err != nil {
		return nil, schemaRefused(r, err)
	}
	p := &ParamsSchema{compiled: s, r: r, defaults: map[string]any{}}
	props, ok := obj["properties"].(map[string]any)
	if _, has := obj["properties"]; has && !ok {
		return nil, &Error{Code: CodeInvalid, Message: "the parameters' schema has properties that are not an object"}
	}
	for name, prop := range props {
		p.names = append(p.names, name)
		if m, ok := prop.(map[string]any); ok {
			if d, has := m["default"]; has {
				p.defaults[name] = d
			}
		}
	}
	slices.Sort(p.names)
	return p, nil
}

// paramsLoader refuses to fetch anything: a parameters schema holds all
// it refers to.
type paramsLoader struct{}

func (paramsLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("it refers to %s, outside itself: a parameters schema holds all it refers to (under $defs)", url)
}

// schemaRefused is the refusal of a parameters schema that does not
// compile, err: the keywords that break the metaschema, by their pointers
// within the schema, or else the compiler's message.
func schemaRefused(r *registry, err error) *Error {
	var se *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &se) && errors.As(se.Err, &ve) {
		return invalidFields("the parameters' schema", r.fieldErrors(ve))
	}
	return &Error{Code: CodeInvalid, Message: "the parameters' schema does not compile: " + err.Error()}
}

// Declares reports whether the schema declares the parameter name: whether
// name is one of its properties.
func (p *ParamsSchema) Declares(name string) bool {
	_, ok := slices.BinarySearch(p.names, name)
	return ok
}

// Names returns the parameters the schema declares, sorted.
func (p *ParamsSchema) Names() []string { return slices.Clone(p.names) }

// Validate checks params, the params object of a run (empty for none),
// against the schema once every declared parameter it leaves out that has
// a default is given that default. It returns params with the defaults in
// place, or an *Error with CodeInvalid whose Fields name each offending
// parameter by its JSON pointer within params ("/region"), as ValidateCommand
// does for a command.
func (p *ParamsSchema) Validate(params json.RawMessage) (json.RawMessage, error) {
	_ = growStack(0)
	if len(bytes.TrimSpace(params)) == 0 {
		params = json.RawMessage("{}")
	}
	if err := CheckBounds(params, MaxMessageBytes, MaxDepth); err != nil {
		return nil, err
	}
	v, fields, derr := decode(params)
	if derr != nil {
		derr.Message = "the params " + derr.Message
		return nil, derr
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{Code: CodeInvalid, Message: "the params must be a JSON object, a value for each parameter by name"}
	}
	var numbers []FieldError
	checkNumbers(obj, nil, &numbers)
	fields = append(fields, numbers...)
	for name, d := range p.defaults {
		if _, given := obj[name]; !given {
			obj[name] = d
		}
	}
	err := p.compiled.Validate(obj)
	var ve *jsonschema.ValidationError
	switch {
	case err == nil:
	case errors.As(err, &ve):
		fields = append(fields, p.r.fieldErrors(ve)...)
	default:
		fields = append(fields, FieldError{Pointer: "", Message: err.Error()})
	}
	if len(fields) > 0 {
		return nil, invalidFields("the params", fields)
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, &Error{Code: CodeInvalid, Message: "the params do not encode: " + err.Error()}
	}
	return out, nil
}

package awsfake

import (
	"encoding/json"
	"net/http"
	"strings"
)

// JSON is an endpoint of the AWS JSON protocol (1.0 or 1.1) as SQS and SSM
// speak it: POST / with X-Amz-Target: <Target>.<Action> and a JSON body,
// answered with a JSON body, or with an error document {"__type":
// "<code>", "message": "..."} from which the SDK takes the error's code
// (smithy-go transport/http/protocol/awsjson). S is the fake's server
// type, whose methods answer the actions.
type JSON[S any] struct {
	// Name is the fake's, for the refusal of an action it does not
	// model: "ssmfake does not implement PutParameter".
	Name string
	// Target is the service's prefix of X-Amz-Target, e.g. AmazonSSM.
	Target string
	// ContentType is application/x-amz-json-1.0 or -1.1.
	ContentType string
	// StrictContentType refuses a request sent as another content type.
	StrictContentType bool
	// BadTarget is the code refusing a request that is not a POST naming
	// an action of the service (or, if StrictContentType, is sent as
	// another content type).
	BadTarget string
	// Unsupported is the code refusing an action not in Actions.
	Unsupported string
	// TypePrefix goes before the code in __type, e.g. com.amazonaws.sqs#.
	TypePrefix string
	// QueryCompatible is set for a service that moved from the Query
	// protocol (SQS): a client that sends X-Amzn-Query-Mode: true takes an
	// error's code from the X-Amzn-Query-Error header (code;Sender, or
	// code;Receiver for a 5xx), in which QueryCodes renames the codes that
	// differ from the error's shape name.
	QueryCompatible bool
	QueryCodes      map[string]string
	// Actions maps each modelled action to its implementation.
	Actions map[string]JSONAction[S]
}

// JSONAction answers one action with the value to encode as the response
// body, or with an error.
type JSONAction[S any] func(s S, r *http.Request, body map[string]any) (any, *Error)

// Serve answers one request to s: it reads the action and the body, lets
// admit refuse the call (a fake records it there, checks its signature and
// injects faults), and answers with what the action's implementation
// returns. A request that cannot be read is refused before admit sees it.
func (p *JSON[S]) Serve(w http.ResponseWriter, r *http.Request, s S, admit func(r *http.Request, action string, body map[string]any) *Error) {
	w.Header().Set("X-Amzn-RequestId", HexID())
	action, body, e := p.read(r)
	if e == nil {
		e = admit(r, action, body)
	}
	var out any
	if e == nil {
		if act, ok := p.Actions[action]; ok {
			out, e = act(s, r, body)
		} else {
			e = BadRequest(p.Unsupported, "%s does not implement %s", p.Name, action)
		}
	}
	if e != nil {
		p.WriteError(w, r, e)
		return
	}
	w.Header().Set("Content-Type", p.ContentType)
	_ = json.NewEncoder(w).Encode(out)
}

// read returns the action X-Amz-Target names and the decoded body.
func (p *JSON[S]) read(r *http.Request) (string, map[string]any, *Error) {
	target := r.Header.Get("X-Amz-Target")
	action, ok := strings.CutPrefix(target, p.Target+".")
	if r.Method != http.MethodPost || !ok {
		return "", nil, BadRequest(p.BadTarget, "expected POST with X-Amz-Target: %s.<Action>, got %s %q", p.Target, r.Method, target)
	}
	if ct := r.Header.Get("Content-Type"); p.StrictContentType && ct != p.ContentType {
		return "", nil, BadRequest(p.BadTarget, "expected Content-Type: %s, got %q", p.ContentType, ct)
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		return "", nil, BadRequest("SerializationException", "request body is not JSON: %v", err)
	}
	return action, body, nil
}

// WriteError answers r with e as the protocol's error document.
func (p *JSON[S]) WriteError(w http.ResponseWriter, r *http.Request, e *Error) {
	if p.QueryCompatible && r.Header.Get("X-Amzn-Query-Mode") == "true" {
		code, fault := e.Code, "Sender"
		if q, ok := p.QueryCodes[code]; ok {
			code = q
		}
		if e.Status >= 500 {
			fault = "Receiver"
		}
		w.Header().Set("X-Amzn-Query-Error", code+";"+fault)
	}
	w.Header().Set("Content-Type", p.ContentType)
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": p.TypePrefix + e.Code, "message": e.Message})
}

// JSONString returns the string member key of a decoded JSON body, or "".
func JSONString(body map[string]any, key string) string {
	v, _ := body[key].(string)
	return v
}

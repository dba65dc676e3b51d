package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// closeConnections closes, through the management API, every connection whose
// client-given connection_name (or user_provided_name) is `name`. A broker whose API lists
// no such connection or cannot close one gets the case skipped, with the reason.
func closeConnections(name string) error {
	client := &http.Client{Timeout: 10 * time.Second}
	var names []string
	// RabbitMQ lists a connection once its first statistics are out (every 5 s by default).
	deadline := time.Now().Add(wait)
	for len(names) == 0 && time.Now().Before(deadline) {
		for _, path := range []string{"/api/stream/connections", "/api/connections"} {
			found, err := connectionNames(client, path, name)
			if err == nil && len(found) > 0 {
				names = found
				break
			}
		}
		if len(names) == 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("%w: the management API lists no connection named %s (GET "+
			"/api/stream/connections and /api/connections)", errSkip, name)
	}
	for _, connection := range names {
		path := "/api/connections/" + url.PathEscape(connection)
		status, body, err := api(client, http.MethodDelete, path)
		if err != nil {
			return err
		}
		switch {
		case status == 404 || status == 405 || status == 501:
			return fmt.Errorf("%w: DELETE %s answered %d: no connection close in the API",
				errSkip, path, status)
		case status/100 != 2:
			return fmt.Errorf("DELETE %s: %d %s", path, status, body)
		}
	}
	return nil
}

func connectionNames(client *http.Client, path, name string) ([]string, error) {
	status, body, err := api(client, http.MethodGet, path)
	if err != nil || status != 200 {
		return nil, fmt.Errorf("GET %s: %d %v", path, status, err)
	}
	var connections []struct {
		Name             string         `json:"name"`
		ClientProperties map[string]any `json:"client_properties"`
		UserProvidedName string         `json:"user_provided_name"`
	}
	if err := json.Unmarshal(body, &connections); err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	var out []string
	for _, c := range connections {
		// The client's name is in client_properties; RabbitMQ copies it to user_provided_name.
		given, _ := c.ClientProperties["connection_name"].(string)
		if given == name || c.UserProvidedName == name {
			out = append(out, c.Name)
		}
	}
	return out, nil
}

// api sends one request to the management API with the HTTP URL's credentials, or else
// the stream URI's.
func api(client *http.Client, method, path string) (int, []byte, error) {
	base, err := url.Parse(httpURL)
	if err != nil {
		return 0, nil, fmt.Errorf("HTTP URL %q: %w", httpURL, err)
	}
	user := base.User
	if user == nil {
		streamURL, err := url.Parse(streamURI)
		if err != nil {
			return 0, nil, err
		}
		user = streamURL.User
	}
	base.User = nil
	request, err := http.NewRequest(method, strings.TrimRight(base.String(), "/")+path, nil)
	if err != nil {
		return 0, nil, err
	}
	password, _ := user.Password()
	request.SetBasicAuth(user.Username(), password)
	response, err := client.Do(request)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(io.LimitReader(response.Body, 16<<20))
	return response.StatusCode, body, err
}

// brokerVersion is the rabbitmq_version the management API reports; false without an HTTP
// URL or an answer.
func brokerVersion() (string, bool) {
	if httpURL == "" {
		return "", false
	}
	status, body, err := api(&http.Client{Timeout: 10 * time.Second}, http.MethodGet,
		"/api/overview")
	if err != nil || status != 200 {
		return "", false
	}
	var overview struct {
		Version string `json:"rabbitmq_version"`
	}
	if json.Unmarshal(body, &overview) != nil || overview.Version == "" {
		return "", false
	}
	return overview.Version, true
}

// versionBefore tells whether version (major.minor...) is before major.minor.
func versionBefore(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	gotMajor, errMajor := strconv.Atoi(parts[0])
	gotMinor, errMinor := strconv.Atoi(parts[1])
	if errMajor != nil || errMinor != nil {
		return false
	}
	return gotMajor < major || (gotMajor == major && gotMinor < minor)
}

// The management API side of StreamInterop's reconnect case: find a stream connection by the
// name its client gave it and close it, as an operator would (DELETE /api/connections/NAME).
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

final class ManagementApi {
  private final String httpUrl;
  private final String streamUri;

  /** The API at httpUrl, with its own credentials or else the stream URI's. */
  ManagementApi(String httpUrl, String streamUri) {
    this.httpUrl = httpUrl;
    this.streamUri = streamUri;
  }

  /**
   * Closes every stream connection whose client-given name starts with `namePrefix`, waiting
   * up to `wait` for the API to list one; returns how many it closed.
   */
  int closeConnections(String namePrefix, Duration wait) throws Exception {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    List<String> names = new ArrayList<>();
    // RabbitMQ lists a connection once its first statistics are out (every 5 s by default).
    long deadline = System.nanoTime() + wait.toNanos();
    while (names.isEmpty() && System.nanoTime() < deadline) {
      for (String path : List.of("/api/stream/connections", "/api/connections")) {
        HttpResponse<String> list = http.send(api(path).GET().build(),
            HttpResponse.BodyHandlers.ofString());
        if (list.statusCode() == 200) {
          names = connectionNames(list.body(), namePrefix);
        }
        if (!names.isEmpty()) {
          break;
        }
      }
      Thread.sleep(names.isEmpty() ? 500 : 0);
    }
    if (names.isEmpty()) {
      throw new StreamInterop.Skip("the management API lists no stream connection named "
          + namePrefix + "* (GET /api/stream/connections and /api/connections)");
    }
    for (String name : names) {
      String path = "/api/connections/" + URLEncoder.encode(name, StandardCharsets.UTF_8)
          .replace("+", "%20");
      HttpResponse<String> closed = http.send(api(path).DELETE().build(),
          HttpResponse.BodyHandlers.ofString());
      if (closed.statusCode() == 404 || closed.statusCode() == 405
          || closed.statusCode() == 501) {
        throw new StreamInterop.Skip("DELETE " + path + " answered " + closed.statusCode()
            + ": no connection close in the management API");
      }
      if (closed.statusCode() / 100 != 2) {
        throw new AssertionError("DELETE " + path + ": " + closed.statusCode() + " "
            + closed.body());
      }
    }
    return names.size();
  }

  private HttpRequest.Builder api(String path) {
    URI parsed = URI.create(streamUri);
    String userInfo = URI.create(httpUrl).getUserInfo();
    String credentials = userInfo != null ? userInfo : parsed.getUserInfo();
    String base = httpUrl.replaceFirst("//[^/@]*@", "//").replaceAll("/+$", "");
    return HttpRequest.newBuilder(URI.create(base + path)).timeout(Duration.ofSeconds(10))
        .header("Authorization", "Basic " + Base64.getEncoder()
            .encodeToString(credentials.getBytes(StandardCharsets.UTF_8)));
  }

  /**
   * The `name` of each connection whose client_properties connection_name starts with
   * namePrefix. A small scanner over the JSON keeps this file free of a JSON library.
   */
  static List<String> connectionNames(String json, String namePrefix) {
    List<String> out = new ArrayList<>();
    // The client's name is in client_properties, and RabbitMQ copies it to
    // user_provided_name.
    String given = "\"connection_name\":\"" + namePrefix;
    String provided = "\"user_provided_name\":\"" + namePrefix;
    for (String object : objectsAtDepth(json, 1)) {
      String compact = object.replace(" ", "");
      if (!compact.contains(given) && !compact.contains(provided)) {
        continue;
      }
      // The connection's own "name" is at its top level, outside client_properties.
      Matcher name = Pattern.compile("\"name\"\\s*:\\s*\"([^\"]*)\"")
          .matcher(withoutNested(object));
      if (name.find()) {
        out.add(name.group(1));
      }
    }
    return out;
  }

  /** The text of every JSON object that opens at `depth` (1 = the elements of an array). */
  static List<String> objectsAtDepth(String json, int depth) {
    List<String> out = new ArrayList<>();
    int level = 0;
    int start = -1;
    boolean inString = false;
    for (int i = 0; i < json.length(); i++) {
      char c = json.charAt(i);
      if (inString) {
        if (c == '\\') {
          i++;
        } else if (c == '"') {
          inString = false;
        }
      } else if (c == '"') {
        inString = true;
      } else if (c == '{' || c == '[') {
        level++;
        if (c == '{' && level == depth + 1) {
          start = i;
        }
      } else if (c == '}' || c == ']') {
        if (c == '}' && level == depth + 1 && start >= 0) {
          out.add(json.substring(start, i + 1));
          start = -1;
        }
        level--;
      }
    }
    return out;
  }

  /** An object's text with its nested objects and arrays removed (strings kept whole). */
  static String withoutNested(String object) {
    StringBuilder flat = new StringBuilder();
    int level = 0;
    boolean inString = false;
    for (int i = 0; i < object.length(); i++) {
      char c = object.charAt(i);
      boolean structural = !inString && (c == '{' || c == '[' || c == '}' || c == ']');
      if (inString && c == '\\' && i + 1 < object.length()) {
        if (level == 1) {
          flat.append(c).append(object.charAt(i + 1));
        }
        i++;
        continue;
      }
      if (c == '"') {
        inString = !inString;
      }
      if (structural && (c == '{' || c == '[')) {
        level++;
      } else if (structural) {
        level--;
      } else if (level == 1) {
        flat.append(c);
      }
    }
    return flat.toString();
  }
}

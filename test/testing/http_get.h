// A plain HTTP GET on 127.0.0.1 for tests of the daemon's HTTP endpoints (libcurl, 10 s unless
// told).
#pragma once

#include <curl/curl.h>

#include <string>

namespace topodra::testing {

struct HttpResponse {
  long code = 0;  // 0: no answer
  std::string body;
  std::string content_type;
};

inline size_t AppendHttpBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

inline HttpResponse HttpGet(int port, const std::string& path, long timeout_ms = 10000) {
  HttpResponse r;
  CURL* curl = curl_easy_init();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendHttpBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.code);
    char* ct = nullptr;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct);
    if (ct != nullptr) r.content_type = ct;
  }
  curl_easy_cleanup(curl);
  return r;
}

}  // namespace topodra::testing

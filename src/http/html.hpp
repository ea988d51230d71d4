// Writing the page's HTML and SVG (page.cpp, group_page.cpp, oom_page.cpp): text escaped for an
// element or an attribute, numbers, links to a group's page. Private to src/http.
//
// Every name on the pages (group paths, member and handler names, errors) goes through esc():
// group paths are restricted to [A-Za-z0-9_.:@+-] (controller.hpp), but member names and errors
// are the application's text, of any bytes.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "utf8.hpp"

namespace memcg::http::detail {

// `s` as the text of an element or a quoted attribute value (HTML and inline SVG alike): the
// five markup characters as references, control characters and bytes that are not UTF-8 as
// U+FFFD, so the document stays well-formed UTF-8 whatever the names hold.
inline void esc(std::string& out, std::string_view s) {
  for_each_utf8(s, [&](std::string_view ch, bool valid) {
    if (!valid) {
      out += kReplacementChar;
      return;
    }
    switch (ch[0]) {
      case '&': out += "&amp;"; return;
      case '<': out += "&lt;"; return;
      case '>': out += "&gt;"; return;
      case '"': out += "&quot;"; return;
      case '\'': out += "&#39;"; return;
      default: break;
    }
    const unsigned char c = static_cast<unsigned char>(ch[0]);
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
      out += kReplacementChar;
      return;
    }
    out += ch;
  });
}

inline void fmt(std::string& out, const char* f, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  out += buf;
}

// The href of a group's page: /group/<path> ("/group/" for the root), any byte outside the
// characters a path segment may hold percent-encoded (group names never need it today).
inline void group_href(std::string& out, std::string_view path) {
  out += "/group/";
  if (path == "/") return;
  static const char kHex[] = "0123456789ABCDEF";
  for (char ch : path) {
    const unsigned char c = static_cast<unsigned char>(ch);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '/' || c == '-' || c == '.' || c == '_' || c == ':' || c == '@' ||
                       c == '+';
    if (plain) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
}

// <a href="/group/path">path</a>
inline void group_link(std::string& out, std::string_view path) {
  out += "<a class=\"group-link\" href=\"";
  group_href(out, path);
  out += "\">";
  esc(out, path);
  out += "</a>";
}

inline constexpr const char kPageStyle[] =
    "body{font-family:sans-serif;margin:16px;color:#222}"
    "table{border-collapse:collapse;font-size:12px}"
    "th,td{padding:2px 6px;text-align:right;border-bottom:1px solid #ddd}"
    "th:first-child,td:first-child{text-align:left}"
    "td.name{text-align:left}"
    "pre{background:#f6f6f6;padding:6px;font-size:12px;white-space:pre-wrap}"
    ".chart{margin:4px 12px 12px 0;display:inline-block;vertical-align:top}"
    ".legend span{margin-right:10px;font-size:11px}"
    ".files{display:inline-block;vertical-align:top;margin-right:12px}"
    ".files h3{font-size:13px;margin:6px 0 2px}"
    "a{color:#1a5fb4}"
    ".status.bad{background:#d02020;color:#fff;font-weight:bold}"
    ".status.warn{background:#f0a830;color:#000}"
    ".status.ok{color:#2a7d3b}"
    ".legend .status{padding:1px 4px}"
    "#trouble li{margin:2px 0}";

// The document's head and the links every page has. `refresh_s` 0: no automatic reload.
inline void page_start(std::string& out, std::string_view title, int refresh_s) {
  out += "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>";
  esc(out, title);
  out += "</title>";
  if (refresh_s > 0)
    out += "<meta http-equiv=\"refresh\" content=\"" + std::to_string(refresh_s) + "\">";
  out += "<style>";
  out += kPageStyle;
  out += "</style></head><body>";
}

inline void page_links(std::string& out) {
  out += "<a href=\"/\">all groups</a> <a href=\"/metrics\">/metrics</a> "
         "<a href=\"/v1/groups\">/v1/groups</a> <a href=\"/v1/oom\">/v1/oom</a> "
         "<a href=\"/v1/oom.txt\">/v1/oom.txt</a>";
}

}  // namespace memcg::http::detail

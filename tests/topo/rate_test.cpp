// Tests for topo/rate.cpp: parse_rate and format_rate.

#include "topo/rate.h"

#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

using gradmesh::topo::format_rate;
using gradmesh::topo::parse_rate;

TEST_CASE("parse_rate reads bits, bytes and plain numbers as bytes/s", "[topo][rate]") {
  struct Row {
    const char* text;
    double bytes_per_s;
  };
  const Row rows[] = {
      {"100mbit", 12.5e6},    {"1gbit", 125e6},       {"500kbit", 62.5e3},
      {"1bit", 0.125},        {"2tbit", 250e9},       {"100Mbit/s", 12.5e6},
      {"1GBIT", 125e6},       {"1gbitps", 125e6},     {"100 mbit", 12.5e6},
      {"100mbits/s", 12.5e6}, {"10MB", 1e7},          {"12.5MB", 12.5e6},
      {"1GB", 1e9},           {"10KB", 1e4},          {"1tb", 1e12},
      {"10MBps", 1e7},        {"10b", 10.0},          {"1MiB/s", 1048576.0},
      {"1KiB", 1024.0},       {"1gib", 1073741824.0}, {"1TiB", 1099511627776.0},
      {"12500000", 12.5e6},   {"1.5e6", 1.5e6},       {" 42 ", 42.0},
      {"12500000/s", 12.5e6},
  };
  for (const Row& row : rows) {
    INFO("text: " << row.text);
    CHECK(parse_rate(row.text) == Approx(row.bytes_per_s));
  }
}

TEST_CASE("parse_rate rejects bad strings and says what it accepts", "[topo][rate]") {
  const char* const bad[] = {"",        "   ", "mbit",  "100 furlongs", "-5mbit", "0",      "0mbit",
                             "nan",     "inf", "1e400", "100mbps",      "10kbps", "1..5MB", "0x10",
                             "10 MB/h", "+5"};
  for (const char* text : bad) {
    INFO("text: '" << text << "'");
    CHECK_THROWS_AS(parse_rate(text), std::invalid_argument);
  }
  CHECK_THROWS_WITH(parse_rate("100 furlongs"), Catch::Contains("\"100 furlongs\"") &&
                                                    Catch::Contains("100mbit") &&
                                                    Catch::Contains("MiB"));
  CHECK_THROWS_WITH(parse_rate("100mbps"), Catch::Contains("ambiguous"));
}

TEST_CASE("format_rate prints bytes and bits in decimal units", "[topo][rate]") {
  CHECK(format_rate(12.5e6) == "12.5 MB/s (100 Mbit/s)");
  CHECK(format_rate(125e6) == "125 MB/s (1 Gbit/s)");
  CHECK(format_rate(1e9) == "1 GB/s (8 Gbit/s)");
  CHECK(format_rate(100.0) == "100 B/s (800 bit/s)");
  CHECK(format_rate(1048576.0) == "1.049 MB/s (8.389 Mbit/s)");
}

TEST_CASE("format_rate output parses back to about the same rate", "[topo][rate]") {
  for (const double rate : {1.0, 999.0, 62.5e3, 12.5e6, 3.2e9, 7e12}) {
    const std::string text = format_rate(rate);
    const std::string bytes_part = text.substr(0, text.find(" ("));
    INFO(text);
    CHECK(parse_rate(bytes_part) == Approx(rate).epsilon(1e-3));
  }
}

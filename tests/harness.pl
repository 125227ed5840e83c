#!/usr/bin/perl
# Runs TAP tests as `prove --exec '' --timer --merge -jJOBS` does (each file executed itself,
# its result printed as it ends, prove's closing summary; one file alone as prove -v; with
# several, each failing check with the lines before it and its diagnostics), then says how many checks were
# skipped and why, so a green run cannot hide what it did not check. The skips are also written
# to SKIPFILE ("FILE<TAB>REASON" per skipped check) for `make test`'s closing summary.
#
# usage: tests/harness.pl JOBS SKIPFILE TEST...
# Exit status: 0 when every test passed, 1 otherwise (as prove).
use strict;
use warnings;
use TAP::Harness;

my ($jobs, $skipfile, @tests) = @ARGV;
die "usage: tests/harness.pl JOBS SKIPFILE TEST...\n" unless defined $skipfile;

my @skips;    # [file, reason], in the order they were seen
my @failures; # [file, lines]: a failing check with the lines before it and its diagnostics
# One file (make check T=FILE) prints every line, its failures' got and want among them.
my $harness = TAP::Harness->new(
  {jobs => $jobs, merge => 1, timer => 1, exec => [], verbosity => (@tests == 1 ? 1 : 0)});
$harness->callback(
  made_parser => sub {
    my ($parser, $job) = @_;
    my $file = ref $job eq 'ARRAY' ? $job->[0] : "$job";
    my (@recent, $open, $run);    # the last lines seen; the failure being written; failures
                                  # with no passing check between them (one entry)
    $parser->callback(
      ALL => sub {
        my $r = shift;
        my $line = $r->as_string;
        if ($r->is_test && !$r->is_ok) {
          if ($run) {
            push @{$run->[1]}, $line;
          } else {
            $run = [$file, [@recent, $line]];
            push @failures, $run;
          }
          $open = $run;
        } elsif ($r->is_test) {
          ($open, $run) = (undef, undef);
        } elsif ($open && @{$open->[1]} < 60) {
          push @{$open->[1]}, $line;
        }
        push @recent, $line;
        shift @recent if @recent > 12;
      });
    $parser->callback(
      test => sub {
        my $r = shift;
        push @skips, [$file, $r->explanation || 'no reason given'] if $r->has_skip;
      });
    $parser->callback(
      plan => sub {
        my $p = shift;
        push @skips, [$file, ($p->explanation || 'no reason given') . ' (the whole file)']
          if $p->has_skip;
      });
  });
my $aggregate = $harness->runtests(@tests);
# With several files a failure shows only as a count: its lines, then, so a CI log says what.
if (@tests > 1) {
  for my $f (@failures) {
    print "Failed in $f->[0]:\n";
    print "  $_\n" for @{$f->[1]};
  }
}
@skips = sort { $a->[0] cmp $b->[0] } @skips;    # by file (they end in any order), stable

open(my $out, '>', $skipfile) or die "tests/harness.pl: cannot write $skipfile: $!\n";
print $out "$_->[0]\t$_->[1]\n" for @skips;
close($out);
summary(\@skips);
exit($aggregate->all_passed ? 0 : 1);

# "Skipped: N checks, in M files:" and one line per file and reason with its count, by file.
sub summary {
  my ($list) = @_;
  if (!@$list) {
    print "Skipped: none.\n";
    return;
  }
  my (%count, @order, %files);
  for my $s (@$list) {
    my $key = "$s->[0]: $s->[1]";
    push @order, $key unless $count{$key}++;
    $files{$s->[0]} = 1;
  }
  my $n = scalar @$list;
  printf "Skipped: %d check%s, in %d file%s:\n", $n, $n == 1 ? '' : 's', scalar keys %files,
    (keys %files) == 1 ? '' : 's';
  printf "  %s%s\n", $_, $count{$_} > 1 ? " ($count{$_} checks)" : '' for @order;
}

/* filter.c - --exclude / --include, with the AWS CLI's rules.
 *
 * Every file is included at first; the filters are then applied in command-line order and the
 * last one whose pattern matches decides. So "--exclude '*' --include '*.json'" keeps only
 * the JSON files, while "--include '*.json' --exclude '*'" keeps nothing. A pattern is
 * matched against the path relative to the source folder or prefix, with fnmatch rules as
 * Python's fnmatch (which the AWS CLI uses) has them: '*' matches any characters, '/'
 * included; '?' one character; [abc] and [!abc] sets. */
#include <fnmatch.h>

#include "cli.h"

int cli_filter_included(const struct cli_opts *o, const char *rel)
{
    int i, included = 1;

    for (i = 0; i < o->nfilters; i++)
        if (fnmatch(o->filters[i].pattern, rel, 0) == 0)
            included = o->filters[i].include;
    return included;
}

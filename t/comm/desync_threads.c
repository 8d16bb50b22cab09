/* threads: ranks out of step are named within 2 s, a late rank is not
 * (t/comm/desync-cases.h). */
#include "t/comm/desync-cases.h"

int main(void)
{
    d_run_all("threads");
    return done_testing();
}

"""A torch rank under torch.distributed.elastic's @record: rank argv[1] raises at once (its error
file gets the exception), the others wait to be torn down."""
import os
import sys
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == int(sys.argv[1]):
        raise ValueError("rank %d found a bad batch" % rank)
    time.sleep(120)


main()
